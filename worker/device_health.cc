#include "worker/device_health.h"

#include <torch/script.h>

#include <array>

namespace torchfarm::worker {

DeviceErrorClass ClassifyDeviceError(const std::string& message) {
  if (message.find("CUDA out of memory") != std::string::npos ||
      message.find("CUBLAS_STATUS_ALLOC_FAILED") != std::string::npos) {
    return DeviceErrorClass::kOutOfMemory;
  }
  static constexpr std::array<const char*, 12> kSticky = {
      "illegal memory access", "device-side assert", "unspecified launch failure",
      "uncorrectable ECC",     "ECC error",          "GPU is lost",
      "misaligned address",    "illegal instruction", "CUDA driver version is insufficient",
      // Under MPS a client whose server failed must exit and reconnect (cudaErrorMps*).
      "cudaErrorMps",          "MPS client",         "MPS server"};
  for (const char* needle : kSticky) {
    if (message.find(needle) != std::string::npos) return DeviceErrorClass::kSticky;
  }
  if (message.find("CUDA error") != std::string::npos ||
      message.find("CUDNN_STATUS") != std::string::npos ||
      message.find("CUBLAS_STATUS") != std::string::npos) {
    return DeviceErrorClass::kOtherDevice;
  }
  return DeviceErrorClass::kModel;
}

bool ProbeDevice(const c10::Device& device) {
  if (device.is_cpu()) return true;
  try {
    at::Tensor probe = torch::ones({8}, at::TensorOptions().device(device));
    return probe.sum().item<float>() == 8.0f;  // item() synchronises
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace torchfarm::worker
