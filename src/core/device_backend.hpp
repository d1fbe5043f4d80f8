// Interface between the collector and an optional device (GPU) backend.
// src/cuda provides make_device_backend(); without CUDA it returns a backend
// that only explains why device timing is absent.
#pragma once

#include "core/aggregator.hpp"
#include "core/env.hpp"

#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <cstdint>
#include <memory>

namespace stepscope {
inline namespace v1 {
namespace detail {

// The run's settings a device backend needs, handed over by the start-up
// (configure) so that src/cuda never reads the core's run-time state.
struct DeviceSettings {
  std::uint64_t warmup_steps = kDefaultWarmupSteps;  // STEPSCOPE_WARMUP: steps left out of per-step device counters
  bool quiet = false;                                // STEPSCOPE_QUIET: no stderr lines
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Collector thread: a drained record that carries a device slot, or every
  // drained record when wants_every_record() (a device timeline needs every
  // step window, also those whose phase got no device events).
  virtual void on_record(const PhaseRecord& record) = 0;
  virtual bool wants_every_record() const { return false; }
  // Collector thread, every tick: resolve completed device work without
  // blocking and hand the device times to the aggregator.
  virtual void poll(Aggregator& aggregator) = 0;
  // At finish: last resolution (may wait briefly for outstanding events) and
  // what the report says about the device.
  virtual void finish(Aggregator& aggregator, DeviceInfo& info) = 0;
  // Once, by the Collector's constructor (the run time builds the collector
  // after it read the settings), before the first on_record() or poll(). The
  // backend may be built before that (on the first scope's thread, see
  // device_in_use), so it must not read settings when built: they arrive
  // here. Default: nothing to configure.
  virtual void configure(const DeviceSettings& settings) noexcept { (void)settings; }
  // What device timing cost the run (the device part of the report's
  // "overhead": how CUPTI was collected, the step time inside and outside its
  // windows). Called with the collector's state lock held. Default: nothing.
  virtual void describe_overhead(Overhead& out) const { (void)out; }
  // Records carrying a device slot that one thread may have in flight
  // between two drains before the backend runs short of slots (0: no
  // limit). The collector's wait keeps a drain's device records under it.
  virtual std::uint32_t device_records_per_drain() const noexcept { return 0; }
};

// Called once at start-up, with the switches the run time read from the
// environment (core/env.hpp: src/cuda reads no variable itself). Never throws;
// never returns null. Installs the hot-path hooks when it can time the device,
// and writes a one-line reason to `notice` when it cannot (for the report: the
// run time does not print it).
std::unique_ptr<DeviceBackend> make_device_backend(const DeviceSwitches& switches, std::string& notice) noexcept;

// True when the program already uses the device (the CUDA driver library is
// loaded). Allocates nothing. Start-up then builds the device backend on the
// first scope's thread, so that device timing covers the first steps; when
// false it is built on the collector thread (no device work to time yet, and
// the application's heap stays untouched).
bool device_in_use() noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
