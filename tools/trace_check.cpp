#include "trace_check.hpp"

#include "report/json_guard.hpp"

#include <fmt/format.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace tools {

namespace {

// At most this many problems are listed; the rest are counted.
constexpr std::size_t kMaxProblems = 20;

// What the per-event checks gather; the event list itself is never kept.
struct EventChecker {
  using json = nlohmann::json;
  using Track = std::pair<std::string, std::string>;  // (pid, tid) as JSON text: ids may be numbers or strings

  explicit EventChecker(TraceCheck& c) : check(c) {}

  TraceCheck& check;
  std::uint64_t more_problems = 0;
  std::set<std::string> named_processes, used_processes;
  std::set<Track> named_threads, used_threads;
  std::map<Track, std::vector<std::pair<double, double>>> intervals;  // per track: (start, end) in us
  double previous_ts = -1e300, first = 1e300, last = -1e300;

  void problem(std::string message) {
    if (check.problems.size() < kMaxProblems)
      check.problems.push_back(std::move(message));
    else
      ++more_problems;
  }

  void event(const json& e) {
    const std::string where = fmt::format("event {}", check.events++);
    if (!e.is_object()) return problem(where + ": not an object");
    if (!e.contains("ph") || !e["ph"].is_string()) return problem(where + ": no string 'ph'");
    const std::string ph = e["ph"].get<std::string>();
    const std::string pid = e.contains("pid") ? e["pid"].dump() : "";
    const std::string tid = e.contains("tid") ? e["tid"].dump() : "";
    if (ph == "M") {
      ++check.metadata_events;
      const std::string name = e.value("name", "");
      const bool has_name =
          e.contains("args") && e["args"].is_object() && e["args"].contains("name") && e["args"]["name"].is_string();
      if (name == "process_name") {
        if (!has_name) problem(where + ": process_name without args.name");
        named_processes.insert(pid);
      } else if (name == "thread_name") {
        if (!has_name) problem(where + ": thread_name without args.name");
        named_threads.insert({pid, tid});
      }
      return;
    }
    if (ph == "i" || ph == "I") ++check.instant_events;
    if (!e.contains("name") || !e["name"].is_string()) problem(where + ": no string 'name'");
    if (pid.empty() || tid.empty()) problem(where + ": no 'pid' or 'tid'");
    if (!e.contains("ts") || !e["ts"].is_number()) return problem(where + ": no numeric 'ts'");
    const double ts = e["ts"].get<double>();
    if (ph != "X") return;
    ++check.complete_events;
    if (!e.contains("dur") || !e["dur"].is_number()) return problem(where + ": complete event without numeric 'dur'");
    const double dur = e["dur"].get<double>();
    if (dur < 0) problem(where + fmt::format(": negative dur {}", dur));
    if (ts < previous_ts) {
      if (check.sorted)
        problem(where + fmt::format(": ts {} before the previous complete event's {} (not sorted)", ts, previous_ts));
      check.sorted = false;
    }
    previous_ts = std::max(previous_ts, ts);
    first = std::min(first, ts);
    last = std::max(last, ts + dur);
    if (e.value("cat", "") == "step") ++check.step_events;
    used_processes.insert(pid);
    used_threads.insert({pid, tid});
    intervals[{pid, tid}].emplace_back(ts, ts + dur);
  }

  // The checks over all events: metadata for every track, nesting per track.
  void finish(bool require_steps) {
    for (const auto& p : used_processes)
      if (!named_processes.count(p)) problem("process " + p + " has no process_name metadata");
    for (const auto& t : used_threads)
      if (!named_threads.count(t))
        problem("thread " + t.second + " of process " + t.first + " has no thread_name metadata");
    // Slices on one track must nest: viewers draw a partial overlap wrongly.
    // Tolerance 0.002 us: timestamps are rounded to the nanosecond on output.
    constexpr double kTolerance_us = 0.002;
    for (auto& [track, list] : intervals) {
      std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;  // parents before children
      });
      std::vector<double> open_ends;
      for (const auto& [start, end] : list) {
        while (!open_ends.empty() && open_ends.back() <= start + kTolerance_us) open_ends.pop_back();
        if (!open_ends.empty() && end > open_ends.back() + kTolerance_us) {
          problem(fmt::format(
              "thread {} of process {}: slice [{}, {}] us overlaps its parent ending at {} us without nesting",
              track.second, track.first, start, end, open_ends.back()));
          break;
        }
        open_ends.push_back(end);
      }
    }
    check.processes = used_processes.size();
    check.threads = used_threads.size();
    check.span_ms = check.complete_events > 0 ? (last - first) / 1000.0 : 0;
    if (check.complete_events == 0) problem("no complete ('X') events");
    if (require_steps && check.step_events == 0) problem("no step marked (no complete event with cat \"step\")");
    if (more_problems > 0) check.problems.push_back(fmt::format("... and {} more problems", more_problems));
  }
};

}  // namespace

TraceCheck check_chrome_trace(const std::string& path, bool require_steps) {
  using nlohmann::json;
  TraceCheck check;
  std::string text;
  // Bounded: a file that does not start like a trace, or is larger than the
  // cap, is refused before it is read whole (src/report/json_guard.hpp).
  if (!stepscope::detail::read_json_input(path, stepscope::detail::JsonInput::chrome_trace, text, check.read_error))
    return check;
  if (text.empty()) {
    check.read_error = "'" + path + "' is empty";
    return check;
  }
  if (const std::string deep = stepscope::detail::depth_problem(text); !deep.empty()) {
    check.read_error = "'" + path + "' is not a Chrome trace: the JSON " + deep;
    return check;
  }
  // Both layouts of the format: {"traceEvents": [...]} and a bare array.
  // Each element of the event list is checked as soon as the parser has
  // built it, then dropped: memory is the text and one event, not a DOM of
  // the whole trace (~7x the text: 2.3 GB for a 193 MiB trace of short events).
  EventChecker checker(check);
  bool array_document = false, in_events = false, saw_events = false;
  std::string top_key;
  const json::parser_callback_t element = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (depth == 0 && event == E::array_start) array_document = true;
    if (depth == 1 && event == E::key && !array_document) top_key = parsed.get<std::string>();
    if (depth == 1 && event == E::array_start && !array_document && top_key == "traceEvents") in_events = true;
    if (depth == 1 && event == E::array_end && in_events) {
      in_events = false;
      saw_events = true;
      return false;
    }
    const int element_depth = array_document ? 1 : 2;
    const bool list = array_document || in_events;
    if (!list || depth != element_depth) return true;
    if (event == E::object_end || event == E::array_end || event == E::value) {
      checker.event(parsed);
      return false;  // checked: not kept
    }
    return true;
  };
  try {
    const json top = json::parse(text, element);  // what the callback kept: the top level, no events
    (void)top;
  } catch (const std::exception& e) {
    check.read_error = std::string("'") + path + "' is not valid JSON: " + e.what();
    return check;
  }
  std::string().swap(text);
  check.readable = true;
  if (!array_document && !saw_events) {
    checker.problem("no 'traceEvents' array (and the document is not an array of events)");
    return check;
  }
  checker.finish(require_steps);
  return check;
}

}  // namespace tools
}  // namespace v1
}  // namespace stepscope
