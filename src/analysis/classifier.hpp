// src/analysis/classifier.hpp — the Classifier that classify() runs, shared by
// verdict.cpp (the evidence, the costs and the verdict) and recommend.cpp
// (the leader's recommendations). Internal to src/analysis.
#pragma once

#include "analysis/facts.hpp"
#include "analysis/thresholds.hpp"

#include <stepscope/analysis.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// The category a signal is evidence for; none: context for every verdict.
using Category = std::optional<Bottleneck>;
inline constexpr Category kNoCategory{};

// What each category costs the step (fractions of the step).
struct Costs {
  std::array<double, kBottleneckCount> values{};
  double& operator[](Bottleneck c) noexcept { return values[static_cast<std::size_t>(c)]; }
  double operator[](Bottleneck c) const noexcept { return values[static_cast<std::size_t>(c)]; }
};

// How a signal counts towards "how much evidence agrees" with the leader.
enum class Weight {
  primary,    // a measure of the category's cost: agrees or disagrees
  secondary,  // a sub-case diagnostic: adds agreement only when it fires
  info        // context; never counted
};

struct Signal {
  Evidence evidence;
  Category category = kNoCategory;
  Weight weight = Weight::info;
};

inline double pct(double fraction) {
  return 100.0 * fraction;
}

class Classifier {
 public:
  explicit Classifier(const Report& report)
      : report_(report),
        shares_(detail::step_shares(report)),
        device_(detail::device_facts(report)),
        step_ms_(detail::mean_step_ms(report)),
        faults_(detail::fault_facts(report)) {}

  Verdict run();

 private:
  // Adds one evidence row; `supports` is computed from the comparison.
  Signal& add(Category category, Weight weight, std::string name, double value, double threshold,
              const char* comparison, std::string sentence) {
    Signal s;
    s.category = category;
    s.weight = weight;
    s.evidence.signal = std::move(name);
    s.evidence.value = value;
    s.evidence.threshold = threshold;
    s.evidence.comparison = comparison;
    const std::string cmp = comparison;
    if (cmp == ">=")
      s.evidence.crossed = value >= threshold;
    else if (cmp == ">")
      s.evidence.crossed = value > threshold;
    else if (cmp == "<")
      s.evidence.crossed = value < threshold;
    else if (cmp == "<=")
      s.evidence.crossed = value <= threshold;
    else
      s.evidence.crossed = false;  // "info"
    // For or against the verdict is only known once the verdict is: see settle_evidence().
    s.evidence.supports = false;
    s.evidence.sentence = std::move(sentence);
    signals_.push_back(std::move(s));
    return signals_.back();
  }
  const Signal* find(const std::string& name) const {
    for (const Signal& s : signals_)
      if (s.evidence.signal == name) return &s;
    return nullptr;
  }
  bool fires(const std::string& name) const {
    const Signal* s = find(name);
    return s != nullptr && s->evidence.crossed;
  }
  // Moves the evidence into the verdict, each row marked for the verdict only
  // when it crossed its threshold and points to the verdict's category.
  void settle_evidence(Category verdict_category, Verdict& v) {
    for (Signal& s : signals_) {
      s.evidence.supports = s.evidence.crossed && verdict_category != kNoCategory && s.category == verdict_category;
      v.evidence.push_back(std::move(s.evidence));
    }
    signals_.clear();
  }

  // No verdict: why, and what to do about it.
  struct Unknown {
    std::string why, advice;
  };
  // The leading category and its runner-up (none: no other), with their costs.
  struct Leader {
    Bottleneck category = Bottleneck::io;
    Category runner = kNoCategory;
    double cost = 0, runner_cost = 0;
  };

  void collect_step_shares();
  void collect_background_phases();
  void collect_system();
  void collect_device();
  void compute_costs();
  void attribute_loader_wait();
  void discount_machine_wait();
  void bound_waiting_compute();
  bool scheduling_signal() const;
  double agreement(Bottleneck category) const;
  std::string top_phase(PhaseKind kind) const;
  std::string summary(Bottleneck category, const std::string& severity) const;

  // The passes of run(), in order, after the evidence is collected.
  std::array<Bottleneck, kBottleneckCount> rank(Verdict& v) const;
  std::optional<Unknown> too_few_steps();
  std::optional<Unknown> unexplained_step();
  std::optional<Unknown> waiting_in_compute() const;
  Leader choose_leader(const std::array<Bottleneck, kBottleneckCount>& order);
  std::optional<Unknown> conflicting(const Leader& lead);
  void decide(const Leader& lead, Verdict& v) const;
  // The verdict "unknown", with the evidence collected so far.
  Verdict finish_unknown(Unknown unknown, Verdict& v);

  // recommend.cpp: the leader's recommendations, one helper per category.
  void recommend(Bottleneck category, Verdict& v) const;
  void recommend_io(std::vector<std::string>& out) const;
  void recommend_io_storage(std::vector<std::string>& out) const;
  void recommend_compute(std::vector<std::string>& out) const;
  void recommend_communication(std::vector<std::string>& out) const;
  void recommend_memory(std::vector<std::string>& out) const;
  void recommend_scheduling(std::vector<std::string>& out) const;
  std::string cpu_contention_advice() const;
  std::string loader_cpu_advice() const;

  const Report& report_;
  detail::StepShares shares_;
  detail::DeviceFacts device_;
  bool host_ahead_ = false;  // median launch delay says the host runs ahead of the device
  double step_ms_ = 0;
  double runqueue_fraction_ = 0;
  // Background input phases: their busy time per step (self time over their
  // threads) as a share of the step; <0: no background input phase.
  double loader_work_share_ = -1;
  std::string loader_phases_;  // their names, for the evidence
  // The step's input wait the loader's own work does not explain, moved to
  // scheduling on a CPU-contended machine (share of the step).
  double idle_loader_wait_ = 0;
  // The CPU wait other processes caused (share of the step): the machine's,
  // not the step's. The verdict is the step's without it, so a busier machine
  // lowers its confidence and never changes its category (issue 29).
  double machine_wait_ = 0;
  double compute_waited_ = 0;  // compute phases' time the thread was off a CPU (bound_waiting_compute)
  // The CPU wait the job's own loader caused (share of the step): input's.
  double loader_wait_ = 0;
  // The step waits for input (>= moderately bound) while the background
  // loader's own work is below idle_loader_work_ratio of that wait.
  bool loader_idle() const {
    return loader_work_share_ >= 0 && shares_.kind[PhaseKind::input] >= kThresholds.moderately_bound &&
           loader_work_share_ < kThresholds.idle_loader_work_ratio * shares_.kind[PhaseKind::input];
  }
  detail::FaultFacts faults_;
  // Input on the critical path at or above the highly-bound tier made io lead
  // over compute (rule b); the runner-up is then compute.
  bool input_over_compute_ = false;
  std::vector<Signal> signals_;
  Costs cost_;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
