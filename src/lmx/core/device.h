// Where a tensor's bytes live: host memory or one CUDA device's memory.
#pragma once

#include <string>

namespace lmx {

enum class DeviceKind : unsigned char { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // the CUDA device number

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  // "cpu", "cuda:0".
  std::string name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace lmx
