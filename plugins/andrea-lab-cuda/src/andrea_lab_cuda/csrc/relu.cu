// ReLU, forward and backward. fp32 / fp16 / bf16; the values pass through fp32 unchanged (exact).
// Like PyTorch: NaN propagates forward, and the backward masks with the saved *output*
// (dx = y <= 0 ? 0 : dy, PyTorch's threshold_backward), so the input need not be kept.
#include "elementwise.cuh"

namespace andrea {
namespace {

struct ReluForward {
  __device__ __forceinline__ void operator()(const float (&in)[1], float (&out)[1]) const {
    const float x = in[0];
    out[0] = x < 0.f ? 0.f : x;  // NaN < 0 is false: NaN passes through
  }
};

struct ReluBackward {
  __device__ __forceinline__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float dy = in[0];
    const float y = in[1];
    out[0] = y <= 0.f ? 0.f : dy;
  }
};

}  // namespace
}  // namespace andrea

// y = relu(x) over n contiguous elements.
ANDREA_API int andrea_relu_fwd(const void* x, void* y, int64_t n, int dtype, int sm_count, void* stream) {
  const void* const in[1] = {x};
  void* const out[1] = {y};
  return andrea::ew_dispatch<false>(dtype, in, nullptr, out, 1, n, andrea::ReluForward{}, sm_count, stream);
}

// dx = (y > 0) * dy over n contiguous elements, y the forward's output.
ANDREA_API int andrea_relu_bwd(const void* dy, const void* y, void* dx, int64_t n, int dtype, int sm_count,
                               void* stream) {
  const void* const in[2] = {dy, y};
  void* const out[1] = {dx};
  return andrea::ew_dispatch<false>(dtype, in, nullptr, out, 1, n, andrea::ReluBackward{}, sm_count, stream);
}
