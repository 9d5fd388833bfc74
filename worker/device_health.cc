#include "worker/device_health.h"

#include <torch/cuda.h>
#include <torch/script.h>

#include <array>

namespace torchfarm::worker {

DeviceErrorClass ClassifyDeviceError(const std::string& message) {
  if (message.find("CUDA out of memory") != std::string::npos ||
      message.find("CUBLAS_STATUS_ALLOC_FAILED") != std::string::npos) {
    return DeviceErrorClass::kOutOfMemory;
  }
  static constexpr std::array<const char*, 9> kSticky = {
      "illegal memory access", "device-side assert", "unspecified launch failure",
      "uncorrectable ECC",     "ECC error",          "GPU is lost",
      "misaligned address",    "illegal instruction", "CUDA driver version is insufficient"};
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

Status CheckDeviceAvailable(const c10::Device& device) {
  if (device.is_cpu()) return Status::Ok();
  if (!device.is_cuda()) {
    return Unavailable("device type " + device.str() + " is not supported (use cpu or cuda:N)");
  }
  if (!torch::cuda::is_available()) {
    return Unavailable("CUDA is not available to this worker (" + device.str() +
                       " requested; LibTorch built without CUDA, no driver, or no visible GPU)");
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (device.has_index() && device.index() >= count) {
    return Unavailable(device.str() + " requested but " + std::to_string(count) +
                       " CUDA device(s) are visible");
  }
  return Status::Ok();
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
