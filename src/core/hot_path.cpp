// The hot path's globals (<stepscope/phase.hpp>): every scope reads them; the
// run time (src/run/) and the device backend (src/cuda/) write them. They live
// here, in the layer of the hot path, so that neither writer defines what the
// other reads.
#include <stepscope/phase.hpp>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::atomic<std::uint8_t> g_mode{kModeUninitialised};
std::atomic<std::uint32_t> g_steps_started{0};
std::atomic<std::uint32_t> g_drain_at_step{0};
std::atomic<DeviceBeginHook> g_device_begin{nullptr};
std::atomic<DeviceEndHook> g_device_end{nullptr};
std::atomic<DeviceAbandonHook> g_device_abandon{nullptr};

void device_slot_dropped(std::uint16_t slot) noexcept {
  if (DeviceAbandonHook hook = g_device_abandon.load(std::memory_order_acquire)) hook(slot);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
