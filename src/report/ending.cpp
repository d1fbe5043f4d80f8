#include "report/ending.hpp"

#include "text/printable.hpp"

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::vector<std::string> run_ending_notes(const Report& r) noexcept {
  std::vector<std::string> notes;
  try {
    // A snapshot is a run that had not ended when it was written, or never
    // did (SIGKILL, the OOM killer, a crash); a signal cuts a run short: said
    // first, so that the numbers are not read as a whole run's.
    if (!r.complete && !r.ranks)
      notes.push_back(fmt::format(
          "snapshot of a run still going{} (complete: false): if the process is gone, it was killed (SIGKILL, the "
          "OOM killer) or crashed; the numbers cover the run up to then",
          r.snapshot_time_utc.empty() ? "" : " at " + r.snapshot_time_utc));
    else if (!r.complete)
      notes.push_back(
          "merged from at least one rank's snapshot (complete: false): that rank was killed, crashed or still "
          "running; the job's numbers stop there for it (the warnings name the ranks)");
    // What the signal says to a user. A crash: the process died of it after the report
    // (core dump, exit status 128 + signal).
    static constexpr std::pair<std::string_view, std::string_view> kSignals[] = {
        {"SIGINT", " (Ctrl-C)"},
        {"SIGSEGV", " (a crash: invalid memory access)"},
        {"SIGBUS", " (a crash: bus error, e.g. a truncated memory-mapped file)"},
        {"SIGFPE", " (a crash: arithmetic error, e.g. an integer division by zero)"},
        {"SIGILL", " (a crash: illegal instruction)"},
        {"SIGABRT", " (abort(): a failed assertion, a library giving up, or a corrupted heap)"}};
    const auto meaning = [](const std::string& signal) {
      for (const auto& [name, text] : kSignals)
        if (name == signal) return text;
      return std::string_view();
    };
    if (r.ended_by.rfind("SIG", 0) == 0) {
      notes.push_back(
          fmt::format("run ended by {}{}: the numbers cover the run up to it", r.ended_by, meaning(r.ended_by)));
    } else if (r.ended_by == "terminate") {
      notes.push_back(r.exception
                          ? fmt::format("run ended by std::terminate {:.1f} s into recording: uncaught exception "
                                        "{}; the numbers cover the run up to it",
                                        r.exception->after_s, exception_text(*r.exception))
                          : "run ended by std::terminate (no exception in flight: std::terminate() was "
                            "called, or a thread was left joinable): the numbers cover the run up to it");
    } else if (r.interrupted) {  // caught (KeyboardInterrupt in Python): the run went on to end by itself
      const char* then = r.ended_by == "finish" ? "ended by finish()"
                         : r.ended_by.empty()   ? "went on"
                                                : "ended by its normal exit";
      notes.push_back(fmt::format(
          "run interrupted by {}{} {:.1f} s into recording: the program (or a library) caught it and the run {}",
          r.interrupted->signal, meaning(r.interrupted->signal), r.interrupted->after_s, then));
    }
    // Python: the interpreter printed the exception and still ran its exit
    // hooks, so the run ended by a normal exit that was anything but.
    if (r.exception && r.ended_by != "terminate")
      notes.push_back(fmt::format(
          "run ended by an uncaught exception {:.1f} s into recording ({}): the numbers cover the run up to it",
          r.exception->after_s, exception_text(*r.exception)));
  } catch (...) {
  }
  return notes;
}

std::string exception_text(const Report::UncaughtException& e) {
  // From a report file: whatever is in it, made safe to print (idempotent on the run time's own text).
  return printable_exception(e.type, e.message);
}

std::vector<std::string> steps_left_out_notes(const StepStats& s) noexcept {
  std::vector<std::string> notes;
  try {
    if (s.unended_excluded > 0)
      notes.push_back(
          fmt::format("{} step{} left out of the statistics ({:.1f} ms): left by its steps() loop (break, return, "
                      "an exception) before its body recorded anything, or the last of next_step(), closed by the end "
                      "of the run (what ran after the loop included)",
                      s.unended_excluded, s.unended_excluded == 1 ? "" : "s", s.unended_wall_ms));
    if (s.outer_excluded > 0)
      notes.push_back(
          fmt::format("{} step{} held steps of {} own on {} thread (a steps() loop around another, or a step() "
                      "inside a steps() loop): counted as loops of steps, not steps; the steps in them are the "
                      "measured steps",
                      s.outer_excluded, s.outer_excluded == 1 ? "" : "s", s.outer_excluded == 1 ? "its" : "their",
                      s.outer_excluded == 1 ? "its" : "their"));
    if (s.next_step_ignored > 0)
      notes.push_back(
          fmt::format("{} next_step() call{} inside a step that steps() or a step scope opened did nothing: that "
                      "one marks the steps (call next_step() only in loops that nothing else marks)",
                      s.next_step_ignored, s.next_step_ignored == 1 ? "" : "s"));
    if (s.evaluation_loops > 0)
      notes.push_back(fmt::format(
          "{} steps() loop{} evaluated the model rather than trained it (gradients off, no backward or optimizer step, "
          "after training steps): {} not steps; {} time is between loops",
          s.evaluation_loops, s.evaluation_loops == 1 ? "" : "s",
          s.evaluation_loops == 1 ? "its iterations are" : "their iterations are",
          s.evaluation_loops == 1 ? "its" : "their"));
  } catch (...) {
    // Out of memory: the notes written so far.
  }
  return notes;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
