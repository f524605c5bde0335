// RMSNorm over the last dimension (Zhang & Sennrich 2019): y = x * rsqrt(mean(x^2) + eps) * w, the
// launchers. The kernels are LayerNorm's (norm.cuh) with RMS = true: no centring, no bias, the same
// layout, width limit, shared-memory handling and deterministic dw reduction.
#include "norm.cuh"

// y = RMSNorm(x) over rows x cols (contiguous); w may be null (no affine weight). rstd (fp32, one
// per row) may be null when no backward follows. Returns a cudaError_t.
ANDREA_API int andrea_rms_norm_fwd(const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t cols,
                                   float eps, int dtype, int wdtype, void* stream) {
  using namespace andrea;
  if (!valid_pair(dtype, wdtype) || rows < 0 || cols < 1 || cols > kMaxCols || !(eps >= 0.f)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kFloat32:
      return norm_fwd_launch<true, float, float>(x, nullptr, nullptr, w, nullptr, y, nullptr, rstd, rows, cols, eps,
                                                 s);
    case kFloat16:
      return norm_fwd_launch<true, __half, __half>(x, nullptr, nullptr, w, nullptr, y, nullptr, rstd, rows, cols,
                                                   eps, s);
    default:
      return norm_fwd_launch<true, __nv_bfloat16, __nv_bfloat16>(x, nullptr, nullptr, w, nullptr, y, nullptr, rstd,
                                                                 rows, cols, eps, s);
  }
}

// Floats of workspace andrea_rms_norm_bwd needs for dw: one partial row per backward block (half of
// LayerNorm's, which also reduces db); -1 for invalid arguments. Pure: no CUDA call.
ANDREA_API int64_t andrea_rms_norm_bwd_workspace(int64_t rows, int64_t cols, int dtype, int sm_count) {
  using namespace andrea;
  if (!valid_dtype(dtype) || rows < 0 || cols < 1 || cols > kMaxCols) return -1;
  if (rows == 0) return 0;
  return ln_bwd_grid(rows, cols, dtype, sm_count) * cols;
}

// dx = RMSNorm backward over rows x cols; dw (in the weight dtype) when non-null, reduced
// deterministically through `workspace` (andrea_rms_norm_bwd_workspace floats). w null means no
// affine weight (g = dy). sm_count must be the value given to the workspace query.
ANDREA_API int andrea_rms_norm_bwd(const void* dy, const void* x, const void* rstd, const void* w, void* dx, void* dw,
                                   void* workspace, int64_t workspace_floats, int64_t rows, int64_t cols, int dtype,
                                   int wdtype, int sm_count, void* stream) {
  using namespace andrea;
  if (!valid_pair(dtype, wdtype) || rows < 0 || cols < 1 || cols > kMaxCols) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (dy == nullptr || x == nullptr || rstd == nullptr || dx == nullptr) return cudaErrorInvalidValue;
  if (dw != nullptr &&
      (workspace == nullptr || workspace_floats < andrea_rms_norm_bwd_workspace(rows, cols, dtype, sm_count))) {
    return cudaErrorInvalidValue;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kFloat32:
      return norm_bwd_launch<true, float, float>(dy, x, nullptr, rstd, w, nullptr, dx, dw, nullptr, workspace, rows,
                                                 cols, dtype, sm_count, s);
    case kFloat16:
      return norm_bwd_launch<true, __half, __half>(dy, x, nullptr, rstd, w, nullptr, dx, dw, nullptr, workspace,
                                                   rows, cols, dtype, sm_count, s);
    default:
      return norm_bwd_launch<true, __nv_bfloat16, __nv_bfloat16>(dy, x, nullptr, rstd, w, nullptr, dx, dw, nullptr,
                                                                 workspace, rows, cols, dtype, sm_count, s);
  }
}
