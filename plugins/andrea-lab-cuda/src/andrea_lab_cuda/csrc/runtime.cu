// Library-level entry points: the ABI version, CUDA runtime/driver versions, error strings, and a
// probe that runs one empty kernel to prove the compiled code can run on the current device.
#include "common.cuh"

// Bumped whenever a launcher's signature changes; the Python wrapper refuses a library whose
// version differs from the one it was written for (andrea_lab_cuda/_lib.py: ABI_VERSION).
#define ANDREA_CUDA_ABI_VERSION 3

namespace andrea {
namespace {

__global__ void probe_kernel(int* out) {
  if (out != nullptr && threadIdx.x == 0) *out = 1;
}

}  // namespace
}  // namespace andrea

ANDREA_API int andrea_cuda_abi_version() { return ANDREA_CUDA_ABI_VERSION; }

// The CUDA runtime this library was linked with (statically), e.g. 13000 for 13.0.
ANDREA_API int andrea_cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = 0;
  return v;
}

// The newest CUDA version the installed driver supports, e.g. 12080; 0 when there is no driver.
ANDREA_API int andrea_cuda_driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) v = 0;
  return v;
}

ANDREA_API const char* andrea_cuda_error_name(int code) { return cudaGetErrorName(static_cast<cudaError_t>(code)); }

ANDREA_API const char* andrea_cuda_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

// Runs an empty kernel and waits for it: cudaErrorInsufficientDriver when the driver is older
// than the runtime, cudaErrorNoKernelImageForDevice when the .so was built for another
// architecture, cudaSuccess when the kernels can run here.
//
// It runs on a stream of its own, created and destroyed here, so it never waits for (nor orders
// itself into) the caller's stream; and in relaxed capture mode for this thread, so a CUDA graph
// being captured elsewhere (or on this thread's current stream) is neither broken nor captured into.
ANDREA_API int andrea_cuda_probe() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaError_t err = cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) return err;
  cudaStream_t s = nullptr;
  err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err == cudaSuccess) {
    andrea::probe_kernel<<<1, 32, 0, s>>>(nullptr);
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    const cudaError_t destroyed = cudaStreamDestroy(s);
    if (err == cudaSuccess) err = destroyed;
  }
  cudaThreadExchangeStreamCaptureMode(&mode);  // the caller's mode back
  return err;
}
