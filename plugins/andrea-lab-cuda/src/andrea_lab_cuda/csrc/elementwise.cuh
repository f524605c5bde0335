// The one elementwise kernel behind GELU, ReLU and SwiGLU (forward and backward): NIN inputs,
// NOUT outputs, an fp32 functor applied per element.
//
// Layout. The outputs are contiguous. GELU and ReLU take contiguous inputs (flat mode, any n up
// to 2^63). SwiGLU's inputs are "row-strided" (STRIDED mode): `rows` rows of `cols` contiguous
// elements, row r of input k at in[k] + r * ld[k]. That is exactly what `h.chunk(2, dim=-1)` gives
// (gate and up are the two halves of each row of h), so SwiGLU reads h in place instead of
// copying both halves; contiguous inputs are the special case rows = 1.
//
// Vectorisation. When every pointer is 16-byte aligned (and, with rows > 1, cols and every ld are
// multiples of the vector width) the kernel moves 128 bits per load/store: 4 fp32 or 8 fp16/bf16
// values. Each thread keeps U vectors of every input in flight before computing (memory level
// parallelism), in a grid-stride loop over one full wave of blocks. The last n % VEC elements are
// done by a scalar tail, so any n works; anything unaligned runs the same kernel with VEC = 1
// (scalar loads and stores). No size has to be a multiple of anything.
#pragma once

#include "common.cuh"

namespace andrea {

template <typename T, int NIN, int NOUT>
struct EwArgs {
  const T* in[NIN];
  T* out[NOUT];
  int64_t ld[NIN];  // row strides of the inputs in elements (STRIDED mode only)
};

template <typename T, int VEC, int NIN, int NOUT, typename Op>
__device__ __forceinline__ void ew_apply(const EwArgs<T, NIN, NOUT>& a, const Pack<T, VEC> (&x)[NIN],
                                         int64_t out_elem, const Op& op) {
  Pack<T, VEC> y[NOUT];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float in[NIN];
    float out[NOUT];
#pragma unroll
    for (int k = 0; k < NIN; ++k) in[k] = to_float(x[k].v[j]);
    op(in, out);
#pragma unroll
    for (int m = 0; m < NOUT; ++m) y[m].v[j] = from_float<T>(out[m]);
  }
#pragma unroll
  for (int m = 0; m < NOUT; ++m) *reinterpret_cast<Pack<T, VEC>*>(a.out[m] + out_elem) = y[m];
}

template <typename T, int VEC, bool STRIDED, int NIN, int NOUT, typename Op>
__global__ void __launch_bounds__(256)
    ew_kernel(const EwArgs<T, NIN, NOUT> a, const int64_t n, const int64_t cols, const Op op) {
  constexpr int U = NIN >= 3 ? 1 : 2;  // vectors in flight per thread and input (>= 32 KB per SM)
  const int64_t nvec = n / VEC;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // STRIDED mode: vector v is in row v / vpr, at vector column v % vpr (32-bit division: the
  // launcher only uses this mode when rows * cols < 2^32). With rows > 1 the vector path needs
  // cols % VEC == 0; with rows == 1 every vector index is < vpr, so the row is always 0.
  const uint32_t vpr = STRIDED ? static_cast<uint32_t>(cols / VEC) : 1u;
  auto in_ptr = [&](int k, int64_t v) -> const T* {
    if (STRIDED) {
      const uint32_t r = static_cast<uint32_t>(v) / vpr;
      const uint32_t c = static_cast<uint32_t>(v) - r * vpr;
      return a.in[k] + static_cast<int64_t>(r) * a.ld[k] + static_cast<int64_t>(c) * VEC;
    }
    return a.in[k] + v * VEC;
  };

  int64_t v = tid;
  for (; v + (U - 1) * stride < nvec; v += U * stride) {
    Pack<T, VEC> x[U][NIN];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < NIN; ++k) x[u][k] = *reinterpret_cast<const Pack<T, VEC>*>(in_ptr(k, v + u * stride));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) ew_apply<T, VEC, NIN, NOUT>(a, x[u], (v + u * stride) * VEC, op);
  }
  for (; v < nvec; v += stride) {
    Pack<T, VEC> x[NIN];
#pragma unroll
    for (int k = 0; k < NIN; ++k) x[k] = *reinterpret_cast<const Pack<T, VEC>*>(in_ptr(k, v));
    ew_apply<T, VEC, NIN, NOUT>(a, x, v * VEC, op);
  }
  if (VEC > 1) {
    // Scalar tail: the last n % VEC (< VEC) elements, one per thread of the first block. (In
    // STRIDED mode there is a tail only when rows == 1: element e is then at column e of row 0.)
    const int64_t e = nvec * VEC + tid;
    if (e < n) {
      Pack<T, 1> x[NIN];
#pragma unroll
      for (int k = 0; k < NIN; ++k) x[k].v[0] = a.in[k][e];
      ew_apply<T, 1, NIN, NOUT>(a, x, e, op);
    }
  }
}

template <typename Kernel>
inline int blocks_per_sm(Kernel kernel, int threads) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0) != cudaSuccess || n < 1) {
    cudaGetLastError();  // clear it: an occupancy query failure must not fail the launch
    n = 2048 / threads;
  }
  return n;
}

template <typename T, int VEC, bool STRIDED, int NIN, int NOUT, typename Op>
inline cudaError_t ew_launch_impl(const EwArgs<T, NIN, NOUT>& a, int64_t n, int64_t cols, const Op& op,
                                  int sm_count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  auto kernel = ew_kernel<T, VEC, STRIDED, NIN, NOUT, Op>;
  static const int occupancy = blocks_per_sm(kernel, kThreads);  // once per instantiation
  // At least one block, so a flat n < VEC still runs its scalar tail.
  const int grid = grid_for(n / VEC, kThreads, sm_count, occupancy);
  kernel<<<grid, kThreads, 0, stream>>>(a, n, cols, op);
  return cudaGetLastError();
}

// Launches op over rows x cols elements, picking the 128-bit path when the alignment allows.
// Flat mode (STRIDED false): rows == 1, contiguous inputs. STRIDED mode: row strides `ld`.
template <typename T, bool STRIDED, int NIN, int NOUT, typename Op>
inline cudaError_t ew_launch(const void* const (&in)[NIN], const int64_t* ld, void* const (&out)[NOUT],
                             int64_t rows, int64_t cols, const Op& op, int sm_count, cudaStream_t stream) {
  constexpr int V = VecWidth<T>::value;
  EwArgs<T, NIN, NOUT> a;
  bool contiguous = true;
  for (int k = 0; k < NIN; ++k) {
    a.in[k] = static_cast<const T*>(in[k]);
    a.ld[k] = STRIDED ? ld[k] : cols;
    contiguous = contiguous && (rows == 1 || a.ld[k] == cols);
  }
  for (int m = 0; m < NOUT; ++m) a.out[m] = static_cast<T*>(out[m]);
  const int64_t n = rows * cols;
  if (contiguous) {  // one flat row
    rows = 1;
    cols = n;
    for (int k = 0; k < NIN; ++k) a.ld[k] = n;
  }
  bool vec_ok = true;
  for (int k = 0; k < NIN; ++k) vec_ok = vec_ok && aligned16(a.in[k]);
  for (int m = 0; m < NOUT; ++m) vec_ok = vec_ok && aligned16(a.out[m]);
  if (STRIDED) {
    if (n >= (int64_t{1} << 32)) return cudaErrorInvalidValue;  // the wrapper uses eager PyTorch there
    if (rows > 1) {
      vec_ok = vec_ok && (cols % V == 0);
      for (int k = 0; k < NIN; ++k) vec_ok = vec_ok && (a.ld[k] % V == 0);
    }
  }
  if (vec_ok) return ew_launch_impl<T, V, STRIDED>(a, n, cols, op, sm_count, stream);
  return ew_launch_impl<T, 1, STRIDED>(a, n, cols, op, sm_count, stream);
}

// Checks the arguments and dispatches on the dtype code. `ld` (STRIDED only): the inputs' row strides.
template <bool STRIDED, int NIN, int NOUT, typename Op>
inline int ew_dispatch(int dtype, const void* const (&in)[NIN], const int64_t* ld, void* const (&out)[NOUT],
                       int64_t rows, int64_t cols, const Op& op, int sm_count, void* stream) {
  if (!valid_dtype(dtype) || rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  for (int k = 0; k < NIN; ++k) {
    if (in[k] == nullptr) return cudaErrorInvalidValue;
    if (STRIDED && rows > 1 && ld[k] < cols) return cudaErrorInvalidValue;
  }
  for (int m = 0; m < NOUT; ++m) {
    if (out[m] == nullptr) return cudaErrorInvalidValue;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kFloat32: return ew_launch<float, STRIDED>(in, ld, out, rows, cols, op, sm_count, s);
    case kFloat16: return ew_launch<__half, STRIDED>(in, ld, out, rows, cols, op, sm_count, s);
    default: return ew_launch<__nv_bfloat16, STRIDED>(in, ld, out, rows, cols, op, sm_count, s);
  }
}

}  // namespace andrea
