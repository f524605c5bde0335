// GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), forward and backward.
// fp32 / fp16 / bf16 in and out, fp32 arithmetic, the same operation order as PyTorch's kernel.
#include "elementwise.cuh"

namespace andrea {
namespace {

constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

struct GeluTanhForward {
  __device__ __forceinline__ void operator()(const float (&in)[1], float (&out)[1]) const {
    const float x = in[0];
    const float inner = kBeta * (x + kKappa * x * x * x);
    out[0] = 0.5f * x * (1.f + tanhf(inner));
  }
};

// dx = dy * d/dx[0.5 x (1 + t)],  t = tanh(inner):
//    = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) * kBeta (1 + 3 kKappa x^2))
struct GeluTanhBackward {
  __device__ __forceinline__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float dy = in[0];
    const float x = in[1];
    const float x_sq = x * x;
    const float inner = kBeta * (x + kKappa * x_sq * x);
    const float t = tanhf(inner);
    const float left_derivative = 0.5f * (1.f + t);
    const float right_derivative = 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x_sq);
    out[0] = dy * (left_derivative + right_derivative);
  }
};

}  // namespace
}  // namespace andrea

// y = gelu_tanh(x) over n contiguous elements.
ANDREA_API int andrea_gelu_tanh_fwd(const void* x, void* y, int64_t n, int dtype, int sm_count, void* stream) {
  const void* const in[1] = {x};
  void* const out[1] = {y};
  return andrea::ew_dispatch<false>(dtype, in, nullptr, out, 1, n, andrea::GeluTanhForward{}, sm_count, stream);
}

// dx = dy * gelu_tanh'(x) over n contiguous elements.
ANDREA_API int andrea_gelu_tanh_bwd(const void* dy, const void* x, void* dx, int64_t n, int dtype, int sm_count,
                                    void* stream) {
  const void* const in[2] = {dy, x};
  void* const out[1] = {dx};
  return andrea::ew_dispatch<false>(dtype, in, nullptr, out, 1, n, andrea::GeluTanhBackward{}, sm_count, stream);
}
