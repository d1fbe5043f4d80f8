// How a live run ends when it does not end by a normal exit (src/run/endings.cpp):
// every signal whose default action ends the process, crashes, std::terminate,
// and the hand-off by which a handler asks the collector thread for the final
// report (docs/architecture.md, "How a run ends"). The run time
// (runtime.cpp, reports.cpp) installs the handlers and writes the reports; this file holds
// the async-signal-safe half.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

class Collector;

// The report takes 20-25 ms from the signal to the exit at load 11
// (docs/benchmarks.md), but its fsync can wait seconds behind a busy disk
// (CI: a 1 s budget lost the SIGHUP report while two compilers wrote beside
// the tests). 5 s stays inside the grace every scheduler gives before its
// SIGKILL: docker stop 10 s, Kubernetes 30 s, Slurm's KillWait 30 s.
inline constexpr long kSignalReportBudgetMs = 5000;

// Who writes the final report: finish() (at exit) or the collector thread
// (after a signal), whichever claims it first.
enum FinalState : std::uint32_t { kFinalNone = 0, kFinalWriting = 1, kFinalWritten = 2, kFinalAbandoned = 3 };
extern std::atomic<std::uint32_t> g_final_state;
// What ends the run when a handler asked for the final report: a signal
// number, or kTerminateEnding. 0: none yet.
inline constexpr int kTerminateEnding = -1;
extern std::atomic<int> g_pending_signal;
// The collector a handler asks (request_stop) for the final report; null
// until it runs, and in a forked child that has none.
extern std::atomic<Collector*> g_signal_collector;
extern std::atomic<long> g_collector_tid;
// The first terminating signal the process received while recording, and
// when (monotonic ns), for the report's `interrupted`: also set when the
// signal did not end the run (a handler of the application's that we observe).
extern std::atomic<int> g_first_signal;
extern std::atomic<std::uint64_t> g_first_signal_ns;

// Wakes every waiter of the final report.
void set_final_state(FinalState state) noexcept;
// Async-signal-safe: waits until the final report is written (or given up),
// at most budget_ms. True when it was written.
bool wait_for_final_report(long budget_ms) noexcept;

// The uncaught exception that ended the run (note_uncaught_exception,
// std::terminate), if one was noted: its type and first message line as
// noted (raw: printable() them), and when (monotonic ns).
bool noted_exception(std::string& type, std::string& message, std::uint64_t& ns);
inline constexpr std::size_t kExceptionTypeBytes = 200;
inline constexpr std::size_t kExceptionMessageBytes = 400;

// A signal of ours that will end this process now that the final report is
// being written: one whose handler (ours) ran, or one of the handled set that
// is pending while this thread blocks it (finish() blocks them while it
// writes). SIGPIPE pending on this thread is left out (our own write to a
// closed pipe raised it; see consume_own_sigpipe). 0: none.
int fatal_signal_now() noexcept;
// Drops a SIGPIPE this thread's writes raised while it was blocked
// (`was_pending`: pending before they started): the report's own write to a
// closed pipe must not end the program.
void consume_own_sigpipe(bool was_pending) noexcept;
bool sigpipe_pending() noexcept;

// The report's ended_by / interrupted.signal for a signal ("SIGQUIT",
// "SIGRTMIN+3"), or "terminate" for kTerminateEnding.
const char* ending_name(int pending) noexcept;

// Blocks every signal the run time handles as a termination (not the
// crashes) on the calling thread; `previous` (may be null) gets the old mask.
void block_termination_signals(sigset_t* previous) noexcept;

// The first scope, on the user's thread (no allocation): a handler for every
// default-fatal signal still at SIG_DFL.
void install_signal_handlers() noexcept;
// The Python package: a thin observer in front of the handlers Python (or a
// library) installed, so a caught Ctrl-C is still in the report.
void observe_signal_handlers() noexcept;

// std::terminate: notes the exception in flight, asks for the final report,
// then calls the handler it replaced (g_previous_terminate).
void on_terminate() noexcept;
extern std::atomic<std::terminate_handler> g_previous_terminate;

// A program that ended before its first scope (an exit after set_config or
// set_rank; any uncaught exception): one line on stderr (unless
// STEPSCOPE_QUIET) that nothing was recorded, instead of silence. `how`: ""
// or " by an uncaught exception". No allocation.
void say_nothing_was_recorded(const char* how) noexcept;

// A forked child that records: the parent's endings are not its own.
void reset_endings_in_child() noexcept;
// A forked child that may not record: no collector here to ask.
void forget_collector_after_fork() noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
