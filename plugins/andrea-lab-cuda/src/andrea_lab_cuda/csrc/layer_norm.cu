// LayerNorm over the last dimension, and the fused residual add + LayerNorm: the launchers. The
// kernels (and their layout, limits and determinism) are in norm.cuh, shared with RMSNorm.
#include "norm.cuh"

// The largest `cols` the LayerNorm launchers accept.
ANDREA_API int64_t andrea_layer_norm_max_cols() { return andrea::kMaxCols; }

// y = LayerNorm(x) over rows x cols (contiguous). With delta (and sum_out) non-null: sum_out =
// x + delta and y = LayerNorm(sum_out). w and b may be null. mean and rstd (fp32, one per row)
// may be null when no backward follows. Returns a cudaError_t.
ANDREA_API int andrea_layer_norm_fwd(const void* x, const void* delta, void* sum_out, const void* w, const void* b,
                                     void* y, void* mean, void* rstd, int64_t rows, int64_t cols, float eps,
                                     int dtype, int wdtype, void* stream) {
  using namespace andrea;
  if (!valid_pair(dtype, wdtype) || rows < 0 || cols < 1 || cols > kMaxCols || !(eps >= 0.f)) {
    return cudaErrorInvalidValue;
  }
  if ((delta == nullptr) != (sum_out == nullptr)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kFloat32:
      return norm_fwd_launch<false, float, float>(x, delta, sum_out, w, b, y, mean, rstd, rows, cols, eps, s);
    case kFloat16:
      return norm_fwd_launch<false, __half, __half>(x, delta, sum_out, w, b, y, mean, rstd, rows, cols, eps, s);
    default:
      return norm_fwd_launch<false, __nv_bfloat16, __nv_bfloat16>(x, delta, sum_out, w, b, y, mean, rstd, rows,
                                                                  cols, eps, s);
  }
}

// Floats of workspace andrea_layer_norm_bwd needs for dw/db (0 when neither is wanted is fine
// too); -1 for invalid arguments. Pure: no CUDA call, so it can be checked without a GPU.
ANDREA_API int64_t andrea_layer_norm_bwd_workspace(int64_t rows, int64_t cols, int dtype, int sm_count) {
  using namespace andrea;
  if (!valid_dtype(dtype) || rows < 0 || cols < 1 || cols > kMaxCols) return -1;
  if (rows == 0) return 0;
  return 2 * ln_bwd_grid(rows, cols, dtype, sm_count) * cols;
}

// dx = LayerNorm backward (+ dres if non-null) over rows x cols; dw / db (in the weight dtype) when
// non-null, reduced deterministically through `workspace` (andrea_layer_norm_bwd_workspace floats).
// w null means no affine weight (g = dy). sm_count must be the value given to the workspace query.
ANDREA_API int andrea_layer_norm_bwd(const void* dy, const void* x, const void* mean, const void* rstd, const void* w,
                                     const void* dres, void* dx, void* dw, void* db, void* workspace,
                                     int64_t workspace_floats, int64_t rows, int64_t cols, int dtype, int wdtype,
                                     int sm_count, void* stream) {
  using namespace andrea;
  if (!valid_pair(dtype, wdtype) || rows < 0 || cols < 1 || cols > kMaxCols) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (dy == nullptr || x == nullptr || mean == nullptr || rstd == nullptr || dx == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (dw != nullptr || db != nullptr) {
    if (workspace == nullptr || workspace_floats < andrea_layer_norm_bwd_workspace(rows, cols, dtype, sm_count)) {
      return cudaErrorInvalidValue;
    }
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kFloat32:
      return norm_bwd_launch<false, float, float>(dy, x, mean, rstd, w, dres, dx, dw, db, workspace, rows, cols, dtype,
                                         sm_count, s);
    case kFloat16:
      return norm_bwd_launch<false, __half, __half>(dy, x, mean, rstd, w, dres, dx, dw, db, workspace, rows, cols, dtype,
                                           sm_count, s);
    default:
      return norm_bwd_launch<false, __nv_bfloat16, __nv_bfloat16>(dy, x, mean, rstd, w, dres, dx, dw, db, workspace, rows,
                                                         cols, dtype, sm_count, s);
  }
}
