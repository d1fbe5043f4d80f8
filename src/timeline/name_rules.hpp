// Name rules (name_rules.cpp) the importer shares with the analyses: what a
// Kineto event's name says about it — a copy's direction, and which part of a
// PyTorch training step (forward, backward) an event belongs to.
#pragma once

#include <string_view>

#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

// Direction and host memory kind from a Kineto memcpy name such as
// "Memcpy HtoD (Pageable -> Device)".
void describe_memcpy(std::string_view name, timeline::MemcpyDirection& direction,
                     timeline::HostMemoryKind& host_memory);

// An autograd node as Kineto names the engine's run of it in the backward
// pass: the node's class, "AddmmBackward0" (PyTorch 1.10 and later) or
// "AddmmBackward" (1.9 and earlier; also custom Functions,
// "CheckpointFunctionBackward"), the leaves' "torch::autograd::AccumulateGrad"
// and C++ custom functions' "torch::autograd::CppNode<...>". From 1.10 on the
// engine also wraps each node in "autograd::engine::evaluate_function: <node>";
// a 1.9 trace has only the node itself, on the engine's thread.
bool is_autograd_node(std::string_view name);

// PyTorch's data-parallel wrappers name the forward of the module they wrap
// with a record_function range of their own: DDP's
// "DistributedDataParallel.forward" (torch/nn/parallel/distributed.py, every
// release from 1.x to 2.x; subclasses such as Lightning's keep the name) and
// FSDP's "FullyShardedDataParallel.forward" (FSDP1; nested units open it
// again inside the outer one). The range is the forward pass: it becomes the
// framework phase "forward", not a phase of its own.
bool is_data_parallel_forward_range(std::string_view name);

// Work DDP's gradient reducer records on the autograd engine's thread while
// the backward pass runs, outside the engine's evaluate_function ranges: the
// bucket copy of each gradient as it becomes ready
// ("torch::distributed::reducer::mul_out", Reducer::mark_variable_ready) and
// the copy back into .grad in the callback that ends the backward pass
// ("torch.distributed.ddp.reducer::copy_bucket_to_grad",
// Reducer::finalize_backward). Both run only inside backward; other reducer
// ranges (search_unused_parameters) run in the forward and are not listed.
bool is_data_parallel_backward_op(std::string_view name);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
