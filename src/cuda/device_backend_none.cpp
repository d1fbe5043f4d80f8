// Device backend of a build without CUDA: device timing is absent, and the
// report says why.
#include "core/device_backend.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {
class NoDeviceBackend final : public DeviceBackend {
 public:
  void on_record(const PhaseRecord&) override {}
  void poll(Aggregator&) override {}
  void finish(Aggregator&, DeviceInfo& info) override {
    info.enabled = false;
    info.status = "no_cuda_build";
    info.reason = "stepscope was built without CUDA (STEPSCOPE_CUDA=OFF or no CUDA toolkit found); host timing only";
  }
};
}  // namespace

std::unique_ptr<DeviceBackend> make_device_backend(const DeviceSwitches&, std::string& notice) noexcept {
  notice.clear();
  try {
    return std::make_unique<NoDeviceBackend>();
  } catch (...) {
    return nullptr;
  }
}

bool device_in_use() noexcept {
  return false;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
