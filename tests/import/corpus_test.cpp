// The regression corpus of real traces (tests/data/traces/corpus/README.md):
// each file's verdict, step count and rank, as `stepscope analyze` reports
// them. A verdict that moves must be explained in the README.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <stepscope/merge.hpp>

#include "import/trace_import.hpp"

namespace {

struct Expected {
  const char* file;
  const char* category;
  std::uint64_t steps;
  int rank, world_size;  // rank -1: the trace has no distributedInfo
};

constexpr Expected kCorpus[] = {
    {"a100_2rank_ddp_rank0.json.gz", "scheduling", 2, 0, 2},
    {"a100_16rank_torchrec_rank0.json.gz", "communication", 4, 0, 16},
    {"a100_triton_one_step.json.gz", "scheduling", 1, -1, 1},
    {"cpu_only_gloo_rank34.json.gz", "unknown", 1, 34, 300},
    // PyTorch 2.x traces from TraceLens (AMD, MIT), with python_function events:
    {"h100_bert_small_forward.json.gz", "scheduling", 1, -1, 1},
    {"mi300x_bert_small_forward.json.gz", "scheduling", 1, -1, 1},
    {"h100_vit_image_classifier_forward.json.gz", "scheduling", 1, -1, 1},
    {"mi300x_8rank_ddp_resnet_checkpointing_rank0.json.gz", "communication", 2, 0, 8},
    {"b200_8rank_eager_inference_rank0.json.gz", "scheduling", 1, 0, 8},
    {"mi300x_sglang_qwen3_decode.json.gz", "scheduling", 1, 0, 1},
    // Training with a data loader (Kineto's TensorBoard-plugin samples, BSD;
    // PARAM's ResNet trace, MIT):
    {"v100_resnet50_training_0_workers.json.gz", "io", 5, -1, 1},
    {"v100_resnet50_training_4_workers.json.gz", "compute", 5, -1, 1},
    {"rtx2080ti_resnet_training_slow_loader.json.gz", "io", 28, -1, 1},
};

stepscope::Report corpus_report(const std::string& file) {
  stepscope::Report r;
  std::string error;
  const bool ok = stepscope::analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/corpus/" + file, r, error);
  INFO(error);
  REQUIRE(ok);
  return r;
}

const stepscope::PhaseSummary* find_phase(const stepscope::Report& r, const std::string& name) {
  for (const auto& p : r.phases)
    if (p.name == name) return &p;
  return nullptr;
}

const stepscope::Evidence* find_evidence(const stepscope::Report& r, const std::string& signal) {
  for (const auto& e : r.bottleneck.evidence)
    if (e.signal == signal) return &e;
  return nullptr;
}

// Every piece of text the user reads.
std::string all_text(const stepscope::Report& r) {
  std::string text = r.bottleneck.summary;
  for (const auto& e : r.bottleneck.evidence) text += "\n" + e.sentence;
  for (const auto& s : r.bottleneck.recommendations) text += "\n" + s;
  for (const auto& f : r.findings) text += "\n" + f.message;
  return text;
}

}  // namespace

TEST_CASE("every corpus trace keeps its verdict", "[import][corpus]") {
  for (const Expected& e : kCorpus) {
    const std::string path = std::string(STEPSCOPE_TEST_DATA_DIR "/traces/corpus/") + e.file;
    INFO(path);
    stepscope::Report r;
    std::string error;
    REQUIRE(stepscope::analyze_trace_file(path, r, error));
    CHECK(r.bottleneck.category == e.category);
    CHECK(r.steps.count == e.steps);
    CHECK(r.run.rank == e.rank);
    CHECK(r.run.world_size == e.world_size);
    CHECK(r.device.enabled == (std::string(e.category) != "unknown"));
  }
}

TEST_CASE("every trace in the corpus folder has its expected verdict here and its provenance in the README",
          "[import][corpus]") {
  // A trace dropped into the folder without an entry would be tested by
  // nothing; one without a README row would have no licence or source.
  const std::string dir = STEPSCOPE_TEST_DATA_DIR "/traces/corpus";
  std::set<std::string> listed;
  for (const Expected& e : kCorpus) listed.insert(e.file);
  std::ifstream readme_file(dir + "/README.md");
  REQUIRE(readme_file);
  std::stringstream readme;
  readme << readme_file.rdbuf();
  std::size_t traces = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 8 || name.compare(name.size() - 8, 8, ".json.gz") != 0) continue;
    INFO(name);
    ++traces;
    CHECK(listed.count(name) == 1);
    CHECK(readme.str().find("`" + name + "`") != std::string::npos);
  }
  CHECK(traces == listed.size());
}

TEST_CASE("the TorchRec trace's top phase is its sparse data distribution", "[import][corpus]") {
  // 69% of each step is the all-to-all of the embeddings: the phase the
  // communication verdict is about, and the first phase of the report.
  stepscope::Report r;
  std::string error;
  REQUIRE(stepscope::analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/corpus/a100_16rank_torchrec_rank0.json.gz", r,
                                        error));
  REQUIRE(!r.phases.empty());
  CHECK(r.phases.front().name.find("sparse_data_dist") != std::string::npos);
  CHECK(r.phases.front().share_of_step > 0.6);
}

TEST_CASE("a PyTorch 2.x forward pass with no data loader is launch-bound, not IO-bound",
          "[import][corpus][pytorch2]") {
  // The issue's trace: BERT on an H100, one ProfilerStep#6, python_function /
  // nn.Module events, no DataLoader. The GPU idles 94% of the step while the
  // host launches, and 69% of the kernels (27 of 39 pairs) run shorter than
  // their cudaLaunchKernel.
  const stepscope::Report r = corpus_report("h100_bert_small_forward.json.gz");
  CHECK(r.bottleneck.category == "scheduling");
  CHECK(r.steps.breakdown.kind_ms[stepscope::PhaseKind::input] == 0);
  const stepscope::Evidence* short_kernels = find_evidence(r, "short_kernel_fraction");
  REQUIRE(short_kernels != nullptr);
  CHECK(short_kernels->supports);
  CHECK(short_kernels->value == Approx(27.0 / 39.0));
  const stepscope::Evidence* idle = find_evidence(r, "idle_launch_bound_fraction");
  REQUIRE(idle != nullptr);
  CHECK(idle->supports);
  CHECK(idle->value > 0.9);
  // The structure comes from the operators and nn.Module frames: forward.
  const stepscope::PhaseSummary* forward = find_phase(r, "forward");
  REQUIRE(forward != nullptr);
  CHECK(forward->share_of_step > 0.9);
  CHECK(find_phase(r, "data") == nullptr);
  // The GPU's sync idle time is named by what owns it, an operator here, not
  // called a phase: the report has no phase of that name.
  bool sync_warning = false;
  for (const std::string& w : r.warnings)
    if (w.find("sync idle") != std::string::npos) {
      sync_warning = true;
      CHECK(w == "most sync idle time is in 'aten::is_nonzero' (an operator or runtime call outside every phase)");
    }
  CHECK(sync_warning);
}

TEST_CASE("ROCm launches are launch evidence too", "[import][corpus][pytorch2]") {
  // The same BERT forward on an MI300X: its launches are hipLaunchKernel /
  // hipExtModuleLaunchKernel, which HTA's launch table does not pair
  // (device.hta keeps HTA's 0 pairs); the verdict's facts do: its 60
  // kernels, 19 of them shorter than their launch call.
  const stepscope::Report r = corpus_report("mi300x_bert_small_forward.json.gz");
  CHECK(r.bottleneck.category == "scheduling");
  REQUIRE(r.device.hta.present);
  CHECK(r.device.hta.launch_stats.pairs == 0);
  CHECK(r.device.facts.launches_per_step.value_or(-1) == 60);
  const stepscope::Evidence* short_kernels = find_evidence(r, "short_kernel_fraction");
  REQUIRE(short_kernels != nullptr);
  CHECK(short_kernels->value == Approx(19.0 / 60.0));
  // ROCm's launch delays are left out (LaunchStatsOptions): on the MI300X
  // ResNet trace they would be 21-39 ms in 16 ms steps, which one cannot
  // tell from a clock offset by the delays alone.
  const stepscope::Report resnet = corpus_report("mi300x_8rank_ddp_resnet_checkpointing_rank0.json.gz");
  CHECK(resnet.device.facts.launches_per_step.value_or(0) > 0);
  CHECK(resnet.device.facts.launch_delay_p50_us.value_or(-1) == 0);
}

TEST_CASE("a GPU that runs behind the host is judged over its own span, not the host's step windows",
          "[import][corpus][pytorch2]") {
  // MI300X DDP ResNet, rank 0 of 8: on the device's own clock it is busy 97%
  // from its first kernel to its last (HTA: idle 2.7% of the kernel span,
  // 66.5% of it communication kernels not overlapping compute), while the
  // host's ProfilerStep windows see it 93% idle: its kernels run queued, two
  // steps after the host launched them. Judged by the windows it read
  // "scheduling: the host fails to keep the GPU fed 93% of the time".
  const stepscope::Report r = corpus_report("mi300x_8rank_ddp_resnet_checkpointing_rank0.json.gz");
  const auto& t = r.device.facts;
  REQUIRE(t.host_window_idle_fraction.has_value());
  CHECK(*t.host_window_idle_fraction > 0.9);
  CHECK(t.device_span_busy_fraction.value_or(0) > 0.95);
  CHECK(t.device_idle_fraction.value_or(1) < 0.05);
  CHECK(t.device_busy_fraction.value_or(0) == Approx(*t.device_span_busy_fraction));
  CHECK(t.exposed_communication_fraction.value_or(0) > 0.5);
  REQUIRE(r.device.hta.present);
  CHECK(r.device.hta.temporal_breakdown.idle_pctg < 5);
  CHECK(r.bottleneck.category == "communication");
  // A finding says so where the summary is read.
  CHECK(std::any_of(r.findings.begin(), r.findings.end(),
                    [](const stepscope::Finding& f) { return f.kind == "device_behind_host"; }));
  CHECK(stepscope::format_summary(r).find("The GPU ran behind the host") != std::string::npos);
  // One kernel in a 13 s step is busy 100% of its own span: not a device
  // behind the host (its span is a sliver of the step), still scheduling.
  const stepscope::Report triton = corpus_report("a100_triton_one_step.json.gz");
  CHECK_FALSE(triton.device.facts.host_window_idle_fraction.has_value());
  CHECK(triton.device.facts.device_span_busy_fraction.value_or(0) > 0.99);
  CHECK(triton.bottleneck.category == "scheduling");
  CHECK(std::none_of(triton.findings.begin(), triton.findings.end(),
                     [](const stepscope::Finding& f) { return f.kind == "device_behind_host"; }));
}

TEST_CASE("a PyTorch 2.x DDP training step has backward, optimizer and forward", "[import][corpus][pytorch2]") {
  // MI300X, rank 0 of 8, ResNet with activation checkpointing, with_stack:
  // no user annotations, only PyTorch's own ranges and Python frames.
  const stepscope::Report r = corpus_report("mi300x_8rank_ddp_resnet_checkpointing_rank0.json.gz");
  const stepscope::PhaseSummary* backward = find_phase(r, "backward");
  const stepscope::PhaseSummary* optimizer = find_phase(r, "optimizer");
  // DDP's own "DistributedDataParallel.forward" range is the forward pass
  // (src/timeline/name_rules.hpp), not a phase of its own beside a 0.2%
  // "forward" of the loss.
  const stepscope::PhaseSummary* forward = find_phase(r, "forward");
  REQUIRE(backward != nullptr);
  REQUIRE(optimizer != nullptr);
  REQUIRE(forward != nullptr);
  CHECK(find_phase(r, "DistributedDataParallel.forward") == nullptr);
  CHECK(backward->share_of_step > 0.4);
  CHECK(forward->share_of_step > 0.3);
  CHECK(optimizer->share_of_step > 0.01);
  CHECK(backward->count == 2);  // ProfilerStep#15-16: #17, the last, is dropped as HTA drops it
  CHECK(forward->count == 2);
  CHECK(r.steps.breakdown.kind_ms[stepscope::PhaseKind::input] == 0);
}

TEST_CASE("the user's forward range around DDP's is the forward phase, under the user's name",
          "[import][corpus][ddp]") {
  // A100, rank 0 of 2: the user's "## forward ##" holds DDP's
  // "DistributedDataParallel.forward" (103 ms of the 221 ms step). The time is
  // the user's range's own, not 0.4 ms of it beside a DDP phase.
  const stepscope::Report r = corpus_report("a100_2rank_ddp_rank0.json.gz");
  const stepscope::PhaseSummary* forward = find_phase(r, "## forward ##");
  REQUIRE(forward != nullptr);
  CHECK(find_phase(r, "DistributedDataParallel.forward") == nullptr);
  CHECK(forward->share_of_step > 0.4);
  CHECK(forward->self_ms.total == Approx(forward->host_ms.total).epsilon(0.01));
}

TEST_CASE("the same ResNet-50 training is input-bound with 0 loader workers and compute-bound with 4",
          "[import][corpus][input]") {
  // Kineto's TensorBoard-plugin samples: one V100, CIFAR-10 at 224x224,
  // batch 32, SGD; only DataLoader(num_workers=) differs. The trace (PyTorch
  // 1.9) files every range as an "Operator", and its backward nodes
  // ("CudnnConvolutionBackward") have no evaluate_function wrapper: the
  // phases still come out by name.
  const stepscope::Report starved = corpus_report("v100_resnet50_training_0_workers.json.gz");
  CHECK(starved.bottleneck.category == "io");
  const stepscope::PhaseSummary* data = find_phase(starved, "data");
  REQUIRE(data != nullptr);
  CHECK(data->count == 5);
  CHECK(data->share_of_step > 0.35);  // 70.6 of 176.9 ms
  CHECK(starved.steps.breakdown.kind_ms[stepscope::PhaseKind::input] > 0.35 * starved.steps.breakdown.wall_ms);
  for (const char* name : {"forward", "backward", "optimizer"}) {
    INFO(name);
    const stepscope::PhaseSummary* p = find_phase(starved, name);
    REQUIRE(p != nullptr);
    CHECK(p->count == 5);
    CHECK(p->share_of_step > 0.1);
  }
  const stepscope::Evidence* input_idle = find_evidence(starved, "idle_host_input_fraction");
  REQUIRE(input_idle != nullptr);
  CHECK(input_idle->supports);
  CHECK(input_idle->value > 0.3);  // the GPU idles 35% of the step while the step thread waits for the batch

  const stepscope::Report fed = corpus_report("v100_resnet50_training_4_workers.json.gz");
  CHECK(fed.bottleneck.category == "compute");
  const stepscope::PhaseSummary* fed_data = find_phase(fed, "data");
  REQUIRE(fed_data != nullptr);
  CHECK(fed_data->share_of_step < 0.02);  // 1.4 of 144.4 ms
  REQUIRE(find_phase(fed, "backward") != nullptr);
}

TEST_CASE("a PyTorch 2.0-era ResNet training without ProfilerSteps waits for its loader", "[import][corpus][input]") {
  // PARAM's trace (RTX 2080 Ti, July 2023): 30 iterations, no ProfilerStep,
  // the DataLoader's workers fall behind (8.2 s of the 16.2 s window inside
  // enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__). One
  // window; the GPU idles 41% of it while the step thread waits for a batch.
  const stepscope::Report r = corpus_report("rtx2080ti_resnet_training_slow_loader.json.gz");
  CHECK(r.bottleneck.category == "io");
  // The 30 fetches mark 29 iterations (the 30th's end is not in the trace);
  // the first, which waits 1.9 s for the workers to start, is warm-up.
  CHECK(r.steps.count == 28);
  CHECK(r.steps.warmup_excluded == 1);
  CHECK(r.run.warmup_source == "inferred");
  CHECK(r.steps.warmup_wall_ms.max > 1500);
  bool inferred = false;
  for (const std::string& w : r.warnings)
    inferred = inferred || w.find("29 iterations inferred from its DataLoader fetches") != std::string::npos;
  CHECK(inferred);
  // Waits of 0.2-0.75 s in some iterations, none in others: the step times
  // spread, and the slow ones are the loader's.
  CHECK(r.steps.wall_ms.max > 2 * r.steps.wall_ms.min);
  const stepscope::Evidence* input_idle = find_evidence(r, "idle_host_input_fraction");
  REQUIRE(input_idle != nullptr);
  CHECK(input_idle->supports);
  CHECK(input_idle->value > 0.35);
  // PyTorch's own ranges split the iterations into phases, so the breakdown
  // beside the io verdict shows the input, not "100% unattributed".
  const auto& b = r.steps.breakdown;
  CHECK(b.wall_ms == Approx(r.steps.wall_ms.mean));
  CHECK(b.kind_ms[stepscope::PhaseKind::input] > 0.55 * b.wall_ms);  // 203 of 321 ms per iteration (63%)
  CHECK(b.kind_ms[stepscope::PhaseKind::input] < 0.70 * b.wall_ms);
  CHECK(b.unattributed_ms < 0.2 * b.wall_ms);
  const stepscope::PhaseSummary* data = find_phase(r, "data");
  REQUIRE(data != nullptr);
  CHECK(data->share_of_step > 0.55);
  for (const char* name : {"forward", "backward", "optimizer"}) {
    INFO(name);
    const stepscope::PhaseSummary* p = find_phase(r, name);
    REQUIRE(p != nullptr);
    CHECK(p->share_of_step > 0.001);  // optimizer: 30 x SGD zero_grad + step, 0.46% of the window
    CHECK(p->share_of_step < data->share_of_step);
  }
  // HTA keeps no step of such a trace: its tables say so.
  CHECK(r.device.hta.steps_kept.empty());
}

TEST_CASE("advice on imported traces speaks PyTorch, not stepscope's C++ API", "[import][corpus][pytorch2]") {
  for (const Expected& e : kCorpus) {
    INFO(e.file);
    const stepscope::Report r = corpus_report(e.file);
    const std::string text = all_text(r);
    CHECK(text.find("STEPSCOPE_") == std::string::npos);
    if (r.bottleneck.category == "scheduling") {
      bool launch_fix = false;
      for (const auto& s : r.bottleneck.recommendations)
        launch_fix =
            launch_fix || s.find("CUDA graph") != std::string::npos || s.find("torch.compile") != std::string::npos;
      CHECK(launch_fix);
    }
  }
}

TEST_CASE("traces without distributedInfo have no rank: merged, they are ranked by position, not duplicates",
          "[import][corpus][merge]") {
  // Debian's torch 1.13 (no Kineto) writes no distributedInfo, even for a
  // DDP job's ranks: `analyze --merge` of two ranks' traces merged the first
  // and dropped the second as a "duplicate report for rank 0".
  const stepscope::Report a = corpus_report("v100_resnet50_training_0_workers.json.gz");
  const stepscope::Report b = corpus_report("v100_resnet50_training_4_workers.json.gz");
  CHECK(a.run.rank == -1);
  CHECK(corpus_report("a100_2rank_ddp_rank0.json.gz").run.rank == 0);  // distributedInfo: its rank
  std::string error;
  const stepscope::Report job = stepscope::merge_reports({a, b}, error);
  INFO(error);
  REQUIRE(job.ranks.has_value());
  CHECK(job.ranks->ranks.size() == 2);
  bool said = false;
  for (const std::string& w : job.warnings) said = said || w.find("their position in the input") != std::string::npos;
  CHECK(said);
}
