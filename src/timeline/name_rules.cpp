// Name-based classification. The kernel rules are HTA's regular expressions
// (hta/common/types.py, applied with Python's re.match, i.e. anchored at the
// start) rewritten as plain string tests: <regex> would cost more than the
// whole import on large traces. The PyTorch rules at the end (autograd nodes,
// DDP/FSDP ranges) are what framework_phases() reads a step's structure from.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string_view>

#include "timeline/name_rules.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Python's ".*X" with re.match: X anywhere on the first line ('.' does not
// match a newline).
bool first_line_contains(std::string_view s, std::string_view needle) {
  const auto newline = s.find('\n');
  if (newline != std::string_view::npos) s = s.substr(0, newline);
  return s.find(needle) != std::string_view::npos;
}

// (^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)
bool is_communication(std::string_view name) {
  return starts_with(name, "nccl") || starts_with(name, "hip") || starts_with(name, "hccl") ||
         first_line_contains(name, "ncclKernel");
}

// (^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)
bool is_memory(std::string_view name) {
  return starts_with(name, "Memcpy") || starts_with(name, "hipMemcpy") || starts_with(name, "Memset") ||
         starts_with(name, "hipMemset") || starts_with(name, "dma");
}

// The compute exclusion list: names matching it are not computation.
bool is_excluded_from_compute(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {"nccl",        "Stream Wait Event",
                                                   "runFunction", "hip",
                                                   "job_exe",     "packet",
                                                   "pe_exe",      "cpum_exe_subgraph",
                                                   "hccl",        "collective_subgraph_execution"};
  for (std::string_view prefix : kPrefixes)
    if (starts_with(name, prefix)) return true;
  static constexpr std::string_view kAnywhere[] = {"Memcpy", "Memset", "dma", "Sync"};
  for (std::string_view needle : kAnywhere)
    if (first_line_contains(name, needle)) return true;
  // (cuda.*LaunchKernel)
  if (starts_with(name, "cuda") && first_line_contains(name.substr(4), "LaunchKernel")) return true;
  return false;
}

}  // namespace

KernelClass classify_kernel(std::string_view name) {
  if (is_communication(name)) return KernelClass::communication;
  if (is_memory(name)) return KernelClass::memory;
  if (!is_excluded_from_compute(name)) return KernelClass::computation;
  return KernelClass::other;
}

HostOpKind classify_runtime_call(std::string_view name) {
  // Calls that put work on a stream and return.
  if (name.find("LaunchKernel") != std::string_view::npos ||
      name.find("LaunchCooperativeKernel") != std::string_view::npos ||
      name.find("GraphLaunch") != std::string_view::npos || starts_with(name, "runFunction") ||
      name.find("MemcpyAsync") != std::string_view::npos || name.find("MemsetAsync") != std::string_view::npos ||
      name.find("MemcpyPeerAsync") != std::string_view::npos)
    return HostOpKind::runtime_launch;
  // Calls that block the host until the device has caught up: explicit
  // synchronisation and the synchronous copy entry points.
  if (name.find("Synchronize") != std::string_view::npos || name == "cudaMemcpy" || name == "cudaMemcpy2D" ||
      name == "hipMemcpy" || name == "hipMemcpyWithStream" || name == "cuMemcpyDtoH" || name == "cuMemcpyDtoH_v2" ||
      name == "cudaMemcpyFromSymbol" || name == "cudaMemcpyToSymbol")
    return HostOpKind::runtime_sync;
  return HostOpKind::runtime_other;
}

const char* to_string(KernelClass cls) {
  constexpr const char* kNames[] = {"COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"};  // HTA's names
  return kNames[std::min<std::size_t>(static_cast<std::size_t>(cls), std::size(kNames) - 1)];
}

const char* to_string(DeviceOpKind kind) {
  constexpr const char* kNames[] = {"kernel", "memcpy", "memset", "sync", "other"};
  return kNames[std::min<std::size_t>(static_cast<std::size_t>(kind), std::size(kNames) - 1)];
}

NameId Timeline::intern(std::string_view text) {
  // Linear: meant for hand-built timelines; the importer interns with a hash index.
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<NameId>(i);
  names.emplace_back(text);
  return static_cast<NameId>(names.size() - 1);
}

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope

namespace stepscope {
inline namespace v1 {
namespace detail {

void describe_memcpy(std::string_view name, timeline::MemcpyDirection& direction,
                     timeline::HostMemoryKind& host_memory) {
  using timeline::MemcpyDirection;
  direction = MemcpyDirection::unknown;
  if (name.find("HtoD") != std::string_view::npos)
    direction = MemcpyDirection::host_to_device;
  else if (name.find("DtoH") != std::string_view::npos)
    direction = MemcpyDirection::device_to_host;
  else if (name.find("DtoD") != std::string_view::npos)
    direction = MemcpyDirection::device_to_device;
  else if (name.find("PtoP") != std::string_view::npos)
    direction = MemcpyDirection::peer_to_peer;
  else if (name.find("HtoH") != std::string_view::npos)
    direction = MemcpyDirection::host_to_host;
  host_memory = timeline::HostMemoryKind::unknown;
  if (name.find("Pageable") != std::string_view::npos)
    host_memory = timeline::HostMemoryKind::pageable;
  else if (name.find("Pinned") != std::string_view::npos)
    host_memory = timeline::HostMemoryKind::pinned;
}

bool is_autograd_node(std::string_view name) {
  if (name == "torch::autograd::AccumulateGrad" || timeline::starts_with(name, "torch::autograd::CppNode<"))
    return true;
  // A class name: no namespace, no spaces ("autograd::engine::evaluate_function: X" is the wrapper).
  if (name.find("::") != std::string_view::npos || name.find(' ') != std::string_view::npos) return false;
  std::size_t digits = 0;
  while (digits < name.size() && name[name.size() - 1 - digits] >= '0' && name[name.size() - 1 - digits] <= '9')
    ++digits;
  const std::string_view stem = name.substr(0, name.size() - digits);
  constexpr std::string_view kBackward = "Backward";
  return stem.size() > kBackward.size() &&
         stem.compare(stem.size() - kBackward.size(), kBackward.size(), kBackward) == 0;
}

bool is_data_parallel_forward_range(std::string_view name) {
  return name == "DistributedDataParallel.forward" || name == "FullyShardedDataParallel.forward";
}

bool is_data_parallel_backward_op(std::string_view name) {
  return name == "torch::distributed::reducer::mul_out" || name == "torch.distributed.ddp.reducer::copy_bucket_to_grad";
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
