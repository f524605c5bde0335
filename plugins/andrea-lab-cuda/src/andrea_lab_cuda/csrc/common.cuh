// Shared helpers for the andrea-lab-cuda kernels: dtype codes, fp32 <-> fp16/bf16 conversions,
// 128-bit packed loads/stores, warp/row reductions and the host-side argument checks.
//
// Every .cu file in this folder includes only this header (and the CUDA toolkit's own headers),
// so each one compiles alone with plain `nvcc -c file.cu`: no torch, no cuBLAS, no other file.
//
// The host entry points are `extern "C"` launchers taking raw device pointers, sizes, a dtype code
// and a cudaStream_t passed as void*. They return the cudaError_t (as int) so the Python side can
// raise a readable error; they never print, abort or allocate device memory (the caller passes
// every buffer, so all memory comes from PyTorch's caching allocator).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Everything but the launchers is hidden (the build also passes -fvisibility=hidden and hides the
// statically linked CUDA runtime), so the .so exports exactly the andrea_* symbols.
#define ANDREA_API extern "C" __attribute__((visibility("default")))

namespace andrea {

// The dtype codes shared with the Python wrapper (andrea_lab_cuda/_lib.py: DTYPE_CODES).
enum DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline bool valid_dtype(int code) { return code == kFloat32 || code == kFloat16 || code == kBFloat16; }

// ---------------------------------------------------------------------------------------------
// Conversions. All arithmetic is fp32; 16-bit values are widened on load and rounded to nearest
// even on store (__float2half_rn / __float2bfloat16_rn, the rounding PyTorch uses).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---------------------------------------------------------------------------------------------
// Packed memory access. Pack<T, N> is N consecutive elements aligned to their total size, so a
// Pack of 16 bytes compiles to one 128-bit load/store (LDG.E.128 / STG.E.128).
// ---------------------------------------------------------------------------------------------
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements of T in one 128-bit vector: 4 for fp32, 8 for fp16/bf16.
template <typename T>
struct VecWidth {
  static constexpr int value = 16 / static_cast<int>(sizeof(T));
};

// Loads N elements of T at p into fp32 registers, in 128-bit chunks (p must be aligned to
// min(16, N * sizeof(T)) bytes; with N == 1 this is a plain scalar load).
template <int N, typename T>
__device__ __forceinline__ void load_float(const T* p, float (&out)[N]) {
  constexpr int kChunk = VecWidth<T>::value < N ? VecWidth<T>::value : N;
  static_assert(N % kChunk == 0, "N must be a multiple of the chunk size");
#pragma unroll
  for (int c = 0; c < N; c += kChunk) {
    const Pack<T, kChunk> pk = *reinterpret_cast<const Pack<T, kChunk>*>(p + c);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) out[c + k] = to_float(pk.v[k]);
  }
}

// Rounds N fp32 values to T and stores them at p in 128-bit chunks (same alignment rule).
template <int N, typename T>
__device__ __forceinline__ void store_float(T* p, const float (&in)[N]) {
  constexpr int kChunk = VecWidth<T>::value < N ? VecWidth<T>::value : N;
  static_assert(N % kChunk == 0, "N must be a multiple of the chunk size");
#pragma unroll
  for (int c = 0; c < N; c += kChunk) {
    Pack<T, kChunk> pk;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) pk.v[k] = from_float<T>(in[c + k]);
    *reinterpret_cast<Pack<T, kChunk>*>(p + c) = pk;
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---------------------------------------------------------------------------------------------
// Reductions. The butterfly below adds the same operands in the same order on every run (and
// a + b == b + a exactly in IEEE arithmetic, so all lanes end with the same bits): deterministic.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sums NV values over the threads of one row group of a (TX, TY) block, where TX is a multiple of
// 32 so a warp never spans two rows. `red` holds 32 * NV floats in shared memory. Every thread of
// the block must call this (it synchronises the block). The partial sums of the row's warps are
// added in warp order by every thread: a fixed order, so the result is deterministic.
template <int NV>
__device__ __forceinline__ void row_sum(float (&v)[NV], float* red) {
  const int lane = threadIdx.x & 31;
  const int warps_per_row = blockDim.x >> 5;
  const int warp = threadIdx.y * warps_per_row + (threadIdx.x >> 5);
#pragma unroll
  for (int k = 0; k < NV; ++k) v[k] = warp_sum(v[k]);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < NV; ++k) red[warp * NV + k] = v[k];
  }
  __syncthreads();
  const int first = threadIdx.y * warps_per_row;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    float s = 0.f;
    for (int w = 0; w < warps_per_row; ++w) s += red[(first + w) * NV + k];
    v[k] = s;
  }
  __syncthreads();  // red is reused by the next reduction
}

// Blocks for a grid-stride elementwise kernel: enough for one full wave of resident blocks.
inline int grid_for(int64_t work_items, int threads, int sm_count, int blocks_per_sm) {
  int64_t blocks = (work_items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<int>(blocks);
}

}  // namespace andrea
