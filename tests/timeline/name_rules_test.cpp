// Name rules (src/timeline/name_rules.cpp) for the ranges PyTorch's
// data-parallel wrappers record, and what framework_phases() makes of them.
// The names are the ones DDP and FSDP emit (torch/nn/parallel/distributed.py,
// torch/csrc/distributed/c10d/reducer.cpp, FSDP's _runtime_utils.py) as seen
// in the corpus's DDP traces (tests/data/traces/corpus/README.md). Times in
// microseconds.
#include <catch2/catch.hpp>

#include "timeline/name_rules.hpp"
#include "timeline/timeline.hpp"
#include "timeline/timeline_builder.hpp"

using namespace stepscope::timeline;
using stepscope::detail::is_data_parallel_backward_op;
using stepscope::detail::is_data_parallel_forward_range;
using stepscope::test::us;

namespace {

std::int64_t phase(const StepFrameworkPhases& p, FrameworkPhase which) {
  return p.phase_ns[static_cast<int>(which)];
}

// One ProfilerStep 0..100 us on thread 1, as a torch.profiler trace of a DDP
// step without with_stack and without user annotations records it:
//    0..40  DistributedDataParallel.forward (the module's operators inside)
//   40..45  the loss, outside DDP's range
//   45..90  the step's thread waits in backward (nothing recorded on it);
//           the autograd engine's thread 2 runs the nodes 45..80 and DDP's
//           reducer finishes the backward pass 80..88 (copy_bucket_to_grad)
//   90..100 nothing recorded
stepscope::test::Builder ddp_step() {
  stepscope::test::Builder b;
  b.host("ProfilerStep#3", 0, 100, HostOpKind::step);
  b.tl.steps.push_back({3, us(0), us(100)});
  b.host("DistributedDataParallel.forward", 0, 40, HostOpKind::annotation);
  b.host("aten::convolution", 5, 20, HostOpKind::framework_op);
  b.host("aten::relu", 20, 25, HostOpKind::framework_op);
  b.host("aten::nll_loss", 40, 45, HostOpKind::framework_op);
  b.host("autograd::engine::evaluate_function: ConvolutionBackward0", 45, 80, HostOpKind::framework_op, 2);
  b.host("torch::distributed::reducer::mul_out", 78, 79, HostOpKind::framework_op, 2);
  b.host("torch.distributed.ddp.reducer::copy_bucket_to_grad", 80, 88, HostOpKind::framework_op, 2);
  return b;
}

}  // namespace

TEST_CASE("DDP's and FSDP's forward ranges are PyTorch's, not the user's", "[timeline][name_rules]") {
  CHECK(is_data_parallel_forward_range("DistributedDataParallel.forward"));
  CHECK(is_data_parallel_forward_range("FullyShardedDataParallel.forward"));
  CHECK(is_pytorch_range("DistributedDataParallel.forward"));
  CHECK(is_pytorch_range("FullyShardedDataParallel.forward"));
  // The Python frame of the same method and the module frame are not the range.
  CHECK_FALSE(is_data_parallel_forward_range("torch/nn/parallel/distributed.py(1637): forward"));
  CHECK_FALSE(is_data_parallel_forward_range("nn.Module: DistributedDataParallel_0"));
  // The user's own forward range, FSDP2's per-module hooks and c10d's
  // collectives keep their names.
  CHECK_FALSE(is_pytorch_range("## forward ##"));
  CHECK_FALSE(is_pytorch_range("FSDP::pre_forward"));
  CHECK_FALSE(is_pytorch_range("nccl:all_reduce"));
}

TEST_CASE("DDP's reducer work in the backward pass is backward", "[timeline][name_rules]") {
  CHECK(is_data_parallel_backward_op("torch::distributed::reducer::mul_out"));
  CHECK(is_data_parallel_backward_op("torch.distributed.ddp.reducer::copy_bucket_to_grad"));
  // Runs in DDP's forward (prepare_for_backward), not in the backward pass.
  CHECK_FALSE(is_data_parallel_backward_op("torch.distributed.ddp.reducer::search_unused_parameters"));
  CHECK_FALSE(is_data_parallel_backward_op("aten::mul_"));
}

TEST_CASE("a DDP step without annotations splits into forward and backward", "[timeline][name_rules][phases]") {
  const stepscope::test::Builder b = ddp_step();
  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  const StepFrameworkPhases& p = steps[0];
  // DDP's range is forward as a whole (0..40, the gaps between its
  // operators included) with the loss after it (40..45); it claims no user time.
  CHECK(p.user_ns == 0);
  CHECK(phase(p, FrameworkPhase::forward) == us(45));
  // The engine's nodes (45..80) and the reducer's finishing copy (80..88).
  CHECK(phase(p, FrameworkPhase::backward) == us(43));
  CHECK(phase(p, FrameworkPhase::data) == 0);
  CHECK(p.unattributed_ns == us(12));
}

TEST_CASE("the user's forward range still wins over DDP's inside it", "[timeline][name_rules][phases]") {
  // As the A100 DDP trace of the corpus records it: the user's "## forward ##"
  // around DDP's range. The step's time there is the user's.
  stepscope::test::Builder b = ddp_step();
  b.host("## forward ##", 0, 42, HostOpKind::annotation);
  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].user_ns == us(42));
  CHECK(phase(steps[0], FrameworkPhase::forward) == us(3));  // the loss after the user's range
}

TEST_CASE("autograd nodes are told by their names, with or without the engine's wrapper", "[timeline][name_rules]") {
  using stepscope::detail::is_autograd_node;
  CHECK(is_autograd_node("AddmmBackward0"));            // PyTorch 1.10 and later
  CHECK(is_autograd_node("CudnnConvolutionBackward"));  // 1.9 and earlier
  CHECK(is_autograd_node("ReluBackward1"));
  CHECK(is_autograd_node("CheckpointFunctionBackward"));  // a custom autograd.Function
  CHECK(is_autograd_node("torch::autograd::AccumulateGrad"));
  CHECK(is_autograd_node("torch::autograd::CppNode<SplitLookupFunction_sgd_Op>"));
  // Operators, the engine's wrapper (matched on its own) and names that only
  // look alike are not nodes.
  CHECK_FALSE(is_autograd_node("aten::convolution_backward"));
  CHECK_FALSE(is_autograd_node("autograd::engine::evaluate_function: AddmmBackward0"));
  CHECK_FALSE(is_autograd_node("Backward"));
  CHECK_FALSE(is_autograd_node("Backward0"));
  CHECK_FALSE(is_autograd_node("## backward ##"));
  CHECK_FALSE(is_autograd_node("aten::addmm"));
}

TEST_CASE("a PyTorch 1.9 step, every range an Operator, still splits into its phases",
          "[timeline][name_rules][phases]") {
  // Kineto before PyTorch 1.10 files record_function ranges as "Operator"
  // events (framework_op here) and runs backward nodes without the
  // evaluate_function wrapper, on the engine's thread 2 — as the corpus's
  // V100 ResNet-50 samples do:
  //    0..40  enumerate(DataLoader)   40..60 forward operators
  //   60..85  backward nodes on thread 2 (thread 1 waits, nothing recorded)
  //   85..95  Optimizer.step          95..100 nothing recorded
  stepscope::test::Builder b;
  b.host("ProfilerStep#5", 0, 100, HostOpKind::step);
  b.tl.steps.push_back({5, us(0), us(100)});
  b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 40, HostOpKind::framework_op);
  b.host("aten::copy_", 10, 20, HostOpKind::framework_op);
  b.host("aten::conv2d", 40, 60, HostOpKind::framework_op);
  b.host("CudnnConvolutionBackward", 60, 80, HostOpKind::framework_op, 2);
  b.host("torch::autograd::AccumulateGrad", 80, 85, HostOpKind::framework_op, 2);
  b.host("Optimizer.step#SGD.step", 85, 95, HostOpKind::framework_op);
  b.host("aten::add_", 86, 94, HostOpKind::framework_op);
  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  const StepFrameworkPhases& p = steps[0];
  CHECK(phase(p, FrameworkPhase::data) == us(40));
  CHECK(phase(p, FrameworkPhase::forward) == us(20));
  CHECK(phase(p, FrameworkPhase::backward) == us(25));
  CHECK(phase(p, FrameworkPhase::optimizer) == us(10));
  CHECK(p.unattributed_ns == us(5));
}
