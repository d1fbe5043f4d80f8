// A library named libcuda.so.1 that the simulator loads on the program's
// first CUDA call, as cudart loads the real driver: stepscope decides
// "the program uses the device" by finding libcuda.so loaded
// (device_in_use in src/cuda/cuda_backend.cpp). It holds no driver code.
extern "C" __attribute__((visibility("default"))) int stepscope_cudasim_driver_present() {
  return 1;
}
