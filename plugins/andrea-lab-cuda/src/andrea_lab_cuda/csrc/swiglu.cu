// SwiGLU's gated op: out = silu(gate) * up, silu(g) = g * sigmoid(g); forward and backward.
// fp32 / fp16 / bf16, fp32 arithmetic, one rounding per output (the eager reference rounds
// silu(gate) before the product, so it is slightly less accurate in fp16/bf16).
//
// gate and up are rows x cols with their own row strides (ld_gate, ld_up, in elements); the
// outputs are contiguous rows x cols. With ld == cols the tensors are plain contiguous arrays;
// with gate, up = h.chunk(2, -1) both have ld == 2 * cols and are read in place from h.
#include "elementwise.cuh"

namespace andrea {
namespace {

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

struct SwigluForward {
  __device__ __forceinline__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float g = in[0];
    const float u = in[1];
    out[0] = g / (1.f + expf(-g)) * u;
  }
};

// d out / d gate = up * s (1 + g (1 - s)),  d out / d up = silu(g) = g s,  s = sigmoid(g).
struct SwigluBackward {
  __device__ __forceinline__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float dout = in[0];
    const float g = in[1];
    const float u = in[2];
    const float s = sigmoid(g);
    out[0] = dout * u * (s * (1.f + g * (1.f - s)));
    out[1] = dout * (g * s);
  }
};

}  // namespace
}  // namespace andrea

ANDREA_API int andrea_swiglu_fwd(const void* gate, int64_t ld_gate, const void* up, int64_t ld_up, void* out,
                                 int64_t rows, int64_t cols, int dtype, int sm_count, void* stream) {
  const void* const in[2] = {gate, up};
  const int64_t ld[2] = {ld_gate, ld_up};
  void* const outs[1] = {out};
  return andrea::ew_dispatch<true>(dtype, in, ld, outs, rows, cols, andrea::SwigluForward{}, sm_count, stream);
}

// dgate and dup are contiguous rows x cols; dout is contiguous rows x cols.
ANDREA_API int andrea_swiglu_bwd(const void* dout, const void* gate, int64_t ld_gate, const void* up, int64_t ld_up,
                                 void* dgate, void* dup, int64_t rows, int64_t cols, int dtype, int sm_count,
                                 void* stream) {
  const void* const in[3] = {dout, gate, up};
  const int64_t ld[3] = {cols, ld_gate, ld_up};
  void* const outs[2] = {dgate, dup};
  return andrea::ew_dispatch<true>(dtype, in, ld, outs, rows, cols, andrea::SwigluBackward{}, sm_count, stream);
}
