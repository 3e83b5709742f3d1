// One of the 64 processes of the "initialise CUDA at once" benchmark: what
// every CUDA program does first (init, primary context, a first allocation).
#include <cuda.h>

int main() {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
    return 1;
  }
  return 0;
}
