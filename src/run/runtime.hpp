// Internals of the run time (src/run/runtime.cpp, reports.cpp, report_output.cpp): the
// layer on top that wires a live run's hand-offs, collector facts ->
// analyze() -> the writers (docs/architecture.md).
#pragma once

#include "core/env.hpp"

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>

#include <map>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

class Collector;

// The longest warning the run time shows (characters, after printable()):
// a path or value from the environment may be 100 kB.
inline constexpr std::size_t kMaxWarningChars = 2000;
// The most of one value (from the environment) a warning quotes.
inline constexpr std::size_t kMaxQuotedValueChars = 80;

// Builds the report from the collector's facts plus run information and the
// analyzer's verdict. final_report stops the collector first.
Report build_report(bool final_report);
// The run's settings for code outside the library's own objects
// (stepscope_mpi): those the collector thread read, or, when recording never
// started, read from the environment now. Exported for that reason only.
STEPSCOPE_API Settings run_settings() noexcept;

// This process's report file, snapshot after snapshot and then the final
// report. Processes that no rank tells apart (torch.multiprocessing or
// mp.spawn workers without RANK, two runs from one directory at once) want
// the same path: the one that finds there a report another process wrote
// while this one ran (its file, modified since this process started) writes
// `<name>.pid<N>.json` instead and says so, rather than replace it. The check
// and the rename hold an flock on the directory (waited for at most
// kDirectoryLockWaitMs), so two processes ending together do not both
// replace an earlier run's file. When the path moves (a rank set after a
// snapshot), this process's own earlier file there is removed.
// Used by one thread at a time: the collector thread's snapshots, then the
// final report after it stopped (or on it, after a signal).
class ReportFile {
 public:
  static constexpr int kDirectoryLockWaitMs = 200;

  // Writes `report` (with the warning, when it moves, added first) for the
  // path `wanted`. True with `written` set to the path used.
  bool write(const std::string& wanted, Report& report, bool durable, std::string& written, std::string& error);

 private:
  std::string moved_to_;    // set once: another process's report was at the wanted path
  std::string moved_note_;  // why, in every report written after
  std::string last_path_;
  unsigned long long last_dev_ = 0, last_ino_ = 0;  // the file this process last put at last_path_
  bool have_last_ = false;
  long long started_ns_ = 0;  // this process's start (CLOCK_REALTIME ns), read at the first write
};

// Writes the report through `file`; when that fails, says so on stderr, notes
// it in the report and writes to the fallback path (`fallback`, reserved by
// reserve_fallback now or by an earlier snapshot; removed when the report
// could go to `path` after all); as a last resort prints the JSON on stderr.
// Returns the path written ("<stderr>" for the last resort).
std::string write_report_with_fallback(ReportFile& file, Report& report, const std::string& path, int rank,
                                       std::string& fallback);
// Creates this process's private fallback file ($TMPDIR or /tmp, 0600,
// exclusively) and sets `fallback` to its path; false with `error` set.
bool reserve_fallback(int rank, std::string& fallback, std::string& error);
// What the report says of the run's machine and build (run.host, run.build).
std::string host_name();
std::map<std::string, std::string> build_options();

// STEPSCOPE_TRACE: writes the captured window as a gzipped Chrome trace,
// beside the report (report_path's directory) unless STEPSCOPE_TRACE_OUT
// says where. A failure's reason goes to stderr and to report.warnings.
void write_trace_if_enabled(Collector& collector, Report& report, const Settings& settings,
                            const std::string& report_path, long child_pid);

// Ends the run: stops the collector and writes the final report (once; later
// calls return the same path). ended_by: "exit" (the exit handler) or
// "finish" (stepscope::finish()).
std::string finish_run(const char* ended_by) noexcept;

// The uncaught exception that ends the run, for the report's `exception`
// (the first call only; bounded copies, no allocation; any thread): the
// Python package's exit hook, and std::terminate in C++ programs.
void note_uncaught_exception(const char* type, const char* message) noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
