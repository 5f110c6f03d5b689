#pragma once
// SingleDeviceStrategy ("single_device"): one process on one device, the
// Trainer's default (Lightning's strategies/single_device.py). Every
// collective is the identity (core/strategy.h).

#include <string>

#include <lightning_cpp/core/strategy.h>

namespace lt {

class SingleDeviceStrategy : public Strategy {
 public:
  explicit SingleDeviceStrategy(torch::Device device = torch::kCPU) : device_(device) {}
  std::string name() const override { return "single_device"; }
  torch::Device root_device() const override { return device_; }

 private:
  torch::Device device_;
};

}  // namespace lt
