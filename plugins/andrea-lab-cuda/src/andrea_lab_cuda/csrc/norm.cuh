// The row-normalisation kernels behind LayerNorm (layer_norm.cu: with the fused residual add) and
// RMSNorm (rms_norm.cu): one forward and one backward kernel, templated on RMS.
//
// LayerNorm (RMS = false):
//   Forward:  y = (x - mean) * rstd * w + b  per row of `cols` elements, saving mean and rstd (fp32,
//             one per row) for the backward. With `delta`, the kernel first forms s = x + delta
//             (rounded to the input dtype, exactly as the eager `x + delta`), writes it to sum_out
//             and normalises s, all in one pass over x and delta.
//   Backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dres),  g = dy * w,
//             dw = sum over rows of dy * xhat,  db = sum over rows of dy.
// RMSNorm (RMS = true; Zhang & Sennrich 2019): nothing is centred and there is no bias.
//   Forward:  y = x * rstd * w,  rstd = rsqrt(mean(x^2) + eps), saving rstd.
//   Backward: dx = rstd * (g - xhat * mean(g * xhat)),  xhat = x * rstd,  dw = sum over rows of dy * xhat.
// The RMS variant is the LayerNorm code path with the mean fixed at 0, the mean(g) term and the bias
// dropped at compile time: same layout, vectorisation, shared-memory limits and reduction order.
//
// Layout: a block of (TX, TY) threads handles TY rows at a time, TX threads per row (TX a multiple
// of 32, so a warp never spans two rows); see ln_config. Loads and stores are 128-bit when cols is
// a multiple of the vector width and every pointer is 16-byte aligned, scalar otherwise.
//
// Determinism: every sum is taken in an order fixed by the launch configuration, never by timing.
// Row sums use a warp butterfly and then the row's warp partials added in warp order. dw/db: each
// thread accumulates, in shared memory, the columns it owns over the rows its block visits (rows
// are assigned to blocks statically); the block then writes one partial row per block to a
// workspace, and a second kernel adds the partials of each column in block order. No atomics.
// The grid of the backward depends only on (rows, cols, dtype, sm_count), so repeated runs on the
// same device give bit-identical gradients.
#pragma once

#include <mutex>

#include "common.cuh"

namespace andrea {
namespace {

// Largest normalised dimension the kernels take, LayerNorm and RMSNorm alike (the wrapper uses
// eager PyTorch above it).
constexpr int64_t kMaxCols = 8192;

struct LnConfig {
  int tx;  // threads per row, a multiple of 32
  int ty;  // rows per block
};

// About two 128-bit vectors per thread (more past 8192 / 16-bit or 4096 / fp32), 32..512 threads per
// row, about 256 threads per block (512 for the widest rows).
// Depends only on cols and the dtype (not on alignment), so the backward's grid is predictable.
inline LnConfig ln_config(int64_t cols, int vec) {
  const int64_t nv = (cols + vec - 1) / vec;
  int64_t tx = ((nv + 1) / 2 + 31) / 32 * 32;
  if (tx < 32) tx = 32;
  if (tx > 512) tx = 512;
  int64_t ty = 256 / tx;
  if (ty < 1) ty = 1;
  return LnConfig{static_cast<int>(tx), static_cast<int>(ty)};
}

inline int vec_width(int dtype) { return dtype == kFloat32 ? 4 : 8; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of the backward's first kernel: at most about one wave (1024 threads' worth per SM), so
// each block visits many rows and the workspace stays small (2 * grid * cols floats).
inline int64_t ln_bwd_grid(int64_t rows, int64_t cols, int dtype, int sm_count) {
  const LnConfig cfg = ln_config(cols, vec_width(dtype));
  const int64_t groups = ceil_div(rows, cfg.ty);
  int64_t per_sm = 1024 / (static_cast<int64_t>(cfg.tx) * cfg.ty);
  if (per_sm < 1) per_sm = 1;
  int64_t grid = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * per_sm;
  if (grid > groups) grid = groups;
  if (grid < 1) grid = 1;
  return grid;
}

constexpr size_t kDefaultSmem = 48 * 1024;

// The most dynamic shared memory a LayerNorm kernel asks for over every width it takes: rows per
// block times cols floats, per array (the forward's row cache: 1; the backward's dw, db: 2).
inline size_t ln_max_smem_bytes(int vec, int arrays) {
  int64_t most = 0;
  for (int64_t cols = 1; cols <= kMaxCols; ++cols) {
    const int64_t floats = static_cast<int64_t>(ln_config(cols, vec).ty) * cols;
    if (floats > most) most = floats;
  }
  return static_cast<size_t>(most) * arrays * sizeof(float);
}

// A launch above 48 KiB of shared memory needs the kernel's limit raised first. The limit belongs
// to the function on the current device, so it is raised once per (kernel, device), to the most
// any width needs (capped at what the device allows), under a lock: setting it per call with that
// call's size would let two host threads launching different widths race (one lowering the limit
// between the other's set and launch).
inline cudaError_t allow_smem(const void* kernel, size_t dynamic_bytes, size_t static_bytes, size_t max_dynamic_bytes) {
  if (dynamic_bytes + static_bytes <= kDefaultSmem) return cudaSuccess;
  // A fixed table (kernels x devices is small; no std::set, whose instantiations would be exported).
  struct Raised {
    const void* kernel;
    int device;
  };
  static Raised raised[1024];
  static int count = 0;
  static std::mutex mutex;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mutex);
  for (int i = 0; i < count; ++i) {
    if (raised[i].kernel == kernel && raised[i].device == device) return cudaSuccess;
  }
  int optin = 0;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return err;
  size_t limit = max_dynamic_bytes;
  if (optin > 0 && limit + static_bytes > static_cast<size_t>(optin)) limit = static_cast<size_t>(optin) - static_bytes;
  if (limit < dynamic_bytes) return cudaErrorInvalidValue;  // this width does not fit this GPU
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit));
  if (err == cudaSuccess && count < 1024) raised[count++] = Raised{kernel, device};
  return err;
}

// ---------------------------------------------------------------------------------------------
// Forward (optionally fused with the residual add).
// ---------------------------------------------------------------------------------------------
template <bool RMS, typename T, typename W, int VEC>
__global__ void __launch_bounds__(512)
    norm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ delta, T* __restrict__ sum_out,
                    const W* __restrict__ w, const W* __restrict__ b, T* __restrict__ y,
                    float* __restrict__ mean, float* __restrict__ rstd, const int64_t rows, const int cols,
                    const float eps) {
  // TY rows of `cols` floats: this block's rows, read from global memory once. Element j of the
  // thread's vector i is kept at slot j * nv + i ("structure of arrays"), so the 32 lanes of a warp
  // touch 32 consecutive floats: no shared-memory bank conflicts.
  extern __shared__ float smem[];
  __shared__ float red[32];
  const int tx = threadIdx.x;
  const int TX = blockDim.x;
  const int TY = blockDim.y;
  const int nv = cols / VEC;
  float* cache = smem + static_cast<int64_t>(threadIdx.y) * cols;

  for (int64_t base = static_cast<int64_t>(blockIdx.x) * TY; base < rows;
       base += static_cast<int64_t>(gridDim.x) * TY) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < rows;  // inactive threads still join the reductions
    const int64_t off = row * cols;

    // Pass 1: load (and add), cache the row in shared memory as fp32, sum it (RMSNorm: sum its
    // squares). Each thread only ever reads back the slots it wrote itself, so the cache needs no
    // synchronisation.
    float s[1] = {0.f};
    if (active) {
      for (int i = tx; i < nv; i += TX) {
        float v[VEC];
        load_float<VEC>(x + off + static_cast<int64_t>(i) * VEC, v);
        if (delta != nullptr) {
          float d[VEC];
          load_float<VEC>(delta + off + static_cast<int64_t>(i) * VEC, d);
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[j] = to_float(from_float<T>(v[j] + d[j]));  // the sum, as stored
          store_float<VEC>(sum_out + off + static_cast<int64_t>(i) * VEC, v);
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          cache[j * nv + i] = v[j];
          s[0] += RMS ? v[j] * v[j] : v[j];
        }
      }
    }
    row_sum<1>(s, red);
    // RMSNorm has no mean: it scales by the root mean square, rsqrt(mean(x^2) + eps).
    const float mu = RMS ? 0.f : s[0] / static_cast<float>(cols);

    // Pass 2 (LayerNorm): the variance around the mean (two-pass: no cancellation when |mean| >> std).
    float q[1] = {RMS ? s[0] : 0.f};
    if (!RMS && active) {
      for (int i = tx; i < nv; i += TX) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float dev = cache[j * nv + i] - mu;
          q[0] += dev * dev;
        }
      }
    }
    if (!RMS) row_sum<1>(q, red);  // RMS is uniform over the block: every thread skips it alike
    const float rs = rsqrtf(q[0] / static_cast<float>(cols) + eps);

    // Pass 3: normalise, scale, shift, store.
    if (active) {
      if (tx == 0) {
        if (mean != nullptr) mean[row] = mu;
        if (rstd != nullptr) rstd[row] = rs;
      }
      for (int i = tx; i < nv; i += TX) {
        float wv[VEC];
        float bv[VEC];
        if (w != nullptr) {
          load_float<VEC>(w + i * VEC, wv);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) wv[j] = 1.f;
        }
        if (b != nullptr) {
          load_float<VEC>(b + i * VEC, bv);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) bv[j] = 0.f;
        }
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          o[j] = RMS ? cache[j * nv + i] * rs * wv[j] : (cache[j * nv + i] - mu) * rs * wv[j] + bv[j];
        }
        store_float<VEC>(y + off + static_cast<int64_t>(i) * VEC, o);
      }
    }
  }
}

template <bool RMS, typename T, typename W>
cudaError_t norm_fwd_launch(const void* x, const void* delta, void* sum_out, const void* w, const void* b, void* y,
                          void* mean, void* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  constexpr int V = VecWidth<T>::value;
  const LnConfig cfg = ln_config(cols, V);
  const bool vec = cols % V == 0 && aligned16(x) && aligned16(delta) && aligned16(sum_out) && aligned16(w) &&
                   aligned16(b) && aligned16(y);
  int64_t grid = ceil_div(rows, cfg.ty);
  if (grid > 0x7fffffff) grid = 0x7fffffff;  // the kernel loops over the rest
  const dim3 block(cfg.tx, cfg.ty);
  const size_t smem = static_cast<size_t>(cfg.ty) * cols * sizeof(float);
  auto kernel = vec ? norm_fwd_kernel<RMS, T, W, V> : norm_fwd_kernel<RMS, T, W, 1>;
  static const size_t max_smem = ln_max_smem_bytes(V, 1);  // config depends on V, not on `vec`
  cudaError_t err = allow_smem(reinterpret_cast<const void*>(kernel), smem, 32 * sizeof(float), max_smem);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), block, smem, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<T*>(sum_out), static_cast<const W*>(w),
      static_cast<const W*>(b), static_cast<T*>(y), static_cast<float*>(mean), static_cast<float*>(rstd), rows,
      static_cast<int>(cols), eps);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Backward.
// ---------------------------------------------------------------------------------------------
template <bool RMS, typename T, typename W, int VEC>
__global__ void __launch_bounds__(512)
    norm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const W* __restrict__ w, const T* __restrict__ dres,
                    T* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b, const int64_t rows,
                    const int cols) {
  // With part_w != null: column accumulators, [TY][cols] for dw then (LayerNorm) [TY][cols] for db,
  // each row slot in the conflict-free order of the forward (column i * VEC + j at slot j * nv + i).
  // RMSNorm: mean is null (the centre is 0) and there is no db.
  extern __shared__ float smem[];
  __shared__ float red[64];
  const int tx = threadIdx.x;
  const int TX = blockDim.x;
  const int TY = blockDim.y;
  const int nv = cols / VEC;
  const bool wgrad = part_w != nullptr;
  float* acc_w = smem + static_cast<int64_t>(threadIdx.y) * cols;
  float* acc_b = smem + static_cast<int64_t>(TY + threadIdx.y) * cols;
  const float inv_cols = 1.f / static_cast<float>(cols);

  if (wgrad) {
    for (int i = tx; i < nv; i += TX) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        acc_w[j * nv + i] = 0.f;
        if (!RMS) acc_b[j * nv + i] = 0.f;
      }
    }
  }

  for (int64_t base = static_cast<int64_t>(blockIdx.x) * TY; base < rows;
       base += static_cast<int64_t>(gridDim.x) * TY) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < rows;
    const int64_t off = row * cols;
    float mu = 0.f;
    float rs = 0.f;
    float sums[2] = {0.f, 0.f};  // sum of g, sum of g * xhat
    if (active) {
      mu = RMS ? 0.f : mean[row];
      rs = rstd[row];
      for (int i = tx; i < nv; i += TX) {
        float dv[VEC];
        float xv[VEC];
        float wv[VEC];
        load_float<VEC>(dy + off + static_cast<int64_t>(i) * VEC, dv);
        load_float<VEC>(x + off + static_cast<int64_t>(i) * VEC, xv);
        if (w != nullptr) {
          load_float<VEC>(w + i * VEC, wv);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) wv[j] = 1.f;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xhat = (xv[j] - mu) * rs;
          const float g = dv[j] * wv[j];
          sums[0] += g;
          sums[1] += g * xhat;
          if (wgrad) {
            acc_w[j * nv + i] += dv[j] * xhat;
            if (!RMS) acc_b[j * nv + i] += dv[j];
          }
        }
      }
    }
    row_sum<2>(sums, red);
    if (active) {
      // RMSNorm: dx = rstd * (g - xhat * mean(g * xhat)), no mean(g) term (nothing was centred).
      const float mean_g = RMS ? 0.f : sums[0] * inv_cols;
      const float mean_gx = sums[1] * inv_cols;
      // Pass 2 re-reads dy and x (just read by this thread: L1/L2 hits) rather than caching them.
      for (int i = tx; i < nv; i += TX) {
        float dv[VEC];
        float xv[VEC];
        float wv[VEC];
        float rv[VEC];
        load_float<VEC>(dy + off + static_cast<int64_t>(i) * VEC, dv);
        load_float<VEC>(x + off + static_cast<int64_t>(i) * VEC, xv);
        if (w != nullptr) {
          load_float<VEC>(w + i * VEC, wv);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) wv[j] = 1.f;
        }
        if (dres != nullptr) {
          load_float<VEC>(dres + off + static_cast<int64_t>(i) * VEC, rv);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) rv[j] = 0.f;
        }
        float o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xhat = (xv[j] - mu) * rs;
          o[j] = (dv[j] * wv[j] - mean_g - xhat * mean_gx) * rs + rv[j];
        }
        store_float<VEC>(dx + off + static_cast<int64_t>(i) * VEC, o);
      }
    }
  }

  if (wgrad) {
    __syncthreads();  // every thread's accumulators are complete
    const int nthreads = TX * TY;
    for (int c = threadIdx.y * TX + tx; c < cols; c += nthreads) {
      const int slot = (c % VEC) * nv + c / VEC;
      float sw = 0.f;
      float sb = 0.f;
      for (int t = 0; t < TY; ++t) {  // fixed order over the block's row slots
        sw += smem[static_cast<int64_t>(t) * cols + slot];
        if (!RMS) sb += smem[static_cast<int64_t>(TY + t) * cols + slot];
      }
      part_w[static_cast<int64_t>(blockIdx.x) * cols + c] = sw;
      if (!RMS) part_b[static_cast<int64_t>(blockIdx.x) * cols + c] = sb;
    }
  }
}

// dw[c] = sum over p of part_w[p][c], in p order (likewise db; part_b null: no db, RMSNorm). Block
// (32, 16): 32 columns, 16 slices of p summed separately (slice k takes p = k, k + 16, ...), then the
// slices in order.
template <typename W>
__global__ void __launch_bounds__(512)
    ln_bwd_reduce_kernel(const float* __restrict__ part_w, const float* __restrict__ part_b, const int64_t parts,
                         const int cols, W* __restrict__ dw, W* __restrict__ db) {
  __shared__ float sw[16][33];
  __shared__ float sb[16][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float aw = 0.f;
  float ab = 0.f;
  if (c < cols) {
    for (int64_t p = threadIdx.y; p < parts; p += 16) {
      aw += part_w[p * cols + c];
      if (part_b != nullptr) ab += part_b[p * cols + c];
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float tw = 0.f;
    float tb = 0.f;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    if (dw != nullptr) dw[c] = from_float<W>(tw);
    if (db != nullptr) db[c] = from_float<W>(tb);
  }
}

template <bool RMS, typename T, typename W>
cudaError_t norm_bwd_launch(const void* dy, const void* x, const void* mean, const void* rstd, const void* w,
                          const void* dres, void* dx, void* dw, void* db, void* workspace, int64_t rows, int64_t cols,
                          int dtype, int sm_count, cudaStream_t stream) {
  constexpr int V = VecWidth<T>::value;
  const LnConfig cfg = ln_config(cols, V);
  const bool vec = cols % V == 0 && aligned16(dy) && aligned16(x) && aligned16(w) && aligned16(dres) &&
                   aligned16(dx);
  const bool wgrad = dw != nullptr || db != nullptr;
  const int64_t grid = ln_bwd_grid(rows, cols, dtype, sm_count);
  float* part_w = wgrad ? static_cast<float*>(workspace) : nullptr;
  float* part_b = wgrad && !RMS ? static_cast<float*>(workspace) + grid * cols : nullptr;
  constexpr int kArrays = RMS ? 1 : 2;  // column accumulators: dw (and db)
  const dim3 block(cfg.tx, cfg.ty);
  const size_t smem = wgrad ? kArrays * static_cast<size_t>(cfg.ty) * cols * sizeof(float) : 0;
  auto kernel = vec ? norm_bwd_kernel<RMS, T, W, V> : norm_bwd_kernel<RMS, T, W, 1>;
  static const size_t max_smem = ln_max_smem_bytes(V, kArrays);
  cudaError_t err = allow_smem(reinterpret_cast<const void*>(kernel), smem, 64 * sizeof(float), max_smem);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), block, smem, stream>>>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const float*>(mean),
      static_cast<const float*>(rstd), static_cast<const W*>(w), static_cast<const T*>(dres), static_cast<T*>(dx),
      part_w, part_b, rows, static_cast<int>(cols));
  err = cudaGetLastError();
  if (err != cudaSuccess || !wgrad) return err;
  const dim3 rblock(32, 16);
  const unsigned rgrid = static_cast<unsigned>(ceil_div(cols, 32));
  ln_bwd_reduce_kernel<W><<<rgrid, rblock, 0, stream>>>(part_w, part_b, grid, static_cast<int>(cols),
                                                        static_cast<W*>(dw), static_cast<W*>(db));
  return cudaGetLastError();
}

// The weights must be in the input's dtype (the Python wrapper sends anything else, e.g. PyTorch's
// "mixed" LayerNorm of bf16 activations with fp32 parameters, to eager PyTorch). The kernels are
// templated on the weight type W separately, so such pairs are one instantiation away; they are
// left out to keep the build small, as no configuration of andrea-lab produces them (under
// autocast LayerNorm runs in fp32, like PyTorch's own autocast policy).
bool valid_pair(int dtype, int wdtype) { return valid_dtype(dtype) && wdtype == dtype; }

}  // namespace
}  // namespace andrea
