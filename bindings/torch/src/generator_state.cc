#include "generator_state.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstring>
#include <mutex>

namespace memento::torch_adapter {
namespace {

constexpr const char* kCpuRngKey = "memento.rng.cpu";
constexpr const char* kCudaRngKey = "memento.rng.cuda.";

std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

at::Tensor BytesTensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

at::Generator CudaGenerator(int device) {
  return at::globalContext().defaultGenerator(
      at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

}  // namespace

void SaveGenerators(std::map<std::string, std::string>* records) {
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    (*records)[kCpuRngKey] = TensorBytes(gen.get_state());
  }
  if (!torch::cuda::is_available()) return;
  for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
    auto gen = CudaGenerator(i);
    std::lock_guard<std::mutex> lock(gen.mutex());
    (*records)[kCudaRngKey + std::to_string(i)] = TensorBytes(gen.get_state());
  }
}

void RestoreGenerators(const std::map<std::string, std::string>& records) {
  if (auto c = records.find(kCpuRngKey); c != records.end()) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(BytesTensor(c->second));
  }
  if (!torch::cuda::is_available()) return;
  for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
    auto c = records.find(kCudaRngKey + std::to_string(i));
    if (c == records.end()) continue;
    auto gen = CudaGenerator(i);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(BytesTensor(c->second));
  }
}

}  // namespace memento::torch_adapter
