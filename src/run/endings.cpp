// How a run ends other than by a normal exit (endings.hpp): the handlers of
// every default-fatal signal, of crashes and of std::terminate, and the
// async-signal-safe hand-off to the collector thread that writes the report.
#include "run/endings.hpp"

#include "run/runtime.hpp"

#include "core/atomic_file.hpp"
#include "core/collector.hpp"
#include "core/env.hpp"

#include <stepscope/clock.hpp>
#include <stepscope/phase.hpp>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cxxabi.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <typeinfo>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::atomic<std::uint32_t> g_final_state{kFinalNone};
std::atomic<int> g_pending_signal{0};
std::atomic<Collector*> g_signal_collector{nullptr};
std::atomic<long> g_collector_tid{0};
std::atomic<int> g_first_signal{0};
std::atomic<std::uint64_t> g_first_signal_ns{0};
std::atomic<std::terminate_handler> g_previous_terminate{nullptr};

namespace {

// ---- Which signals ----
//
// Every signal whose default action ends the process gets the final report
// when the application left it at SIG_DFL (an application's, a sanitizer's or
// faulthandler's handler is never replaced; one installed later replaces
// ours: the application then decides how its run ends, our snapshot remains).
// Termination signals are asynchronous (kill, a terminal, a timer, a closed
// pipe, a resource limit): their handler hands the report to the collector
// thread and waits. Crash signals come from the instruction the thread ran:
// the same hand-off, on the alternate stack. SIGKILL and SIGSTOP cannot be
// caught; SIGCHLD, SIGCONT, SIGURG, SIGWINCH do not end a process.
constexpr int kFixedTerminationSignals[] = {
    SIGINT,    SIGTERM,   SIGHUP,  SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
    SIGALRM,   SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGPWR,  SIGIO,
#ifdef SIGSTKFLT
    SIGSTKFLT,
#endif
};
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP};

// The termination set: the fixed signals and the real-time ones (SIGRTMIN..
// SIGRTMAX, whose default action also ends the process; glibc keeps the two
// below SIGRTMIN for itself). Async-signal-safe.
sigset_t termination_set() noexcept {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kFixedTerminationSignals) sigaddset(&set, sig);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) sigaddset(&set, sig);
  return set;
}

bool is_termination_signal(int sig) noexcept {
  const sigset_t set = termination_set();
  return sig > 0 && sig < NSIG && sigismember(&set, sig) == 1;
}

// Names for every signal number, built once ("SIGRTMIN+3" included).
struct SignalNames {
  char name[NSIG][16];
  SignalNames() {
    for (int sig = 0; sig < NSIG; ++sig) {
      const char* abbrev = sig > 0 ? ::sigabbrev_np(sig) : nullptr;
      if (sig >= SIGRTMIN && sig <= SIGRTMAX)
        std::snprintf(name[sig], sizeof name[sig], sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+%d", sig - SIGRTMIN);
      else if (abbrev != nullptr)
        std::snprintf(name[sig], sizeof name[sig], "SIG%s", abbrev);
      else
        std::snprintf(name[sig], sizeof name[sig], "signal %d", sig);
    }
  }
};

// ---- The hand-off ----

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// A handler's wait for the final report: when time ran out with the report
// still being written, its half-written temporary file is removed (the
// process is about to die). Not when the report was given up (that writer
// cleaned up after itself), nor in a forked child that records nothing
// (after_fork_child: given up from the start; a temporary file it inherited
// is the parent's).
void wait_for_final_report_or_clean_up() noexcept {
  if (!wait_for_final_report(kSignalReportBudgetMs) && g_final_state.load() != kFinalAbandoned)
    remove_pending_temp_file();
}

void note_signal(int sig) noexcept {
  int none = 0;
  if (g_first_signal.compare_exchange_strong(none, sig)) g_first_signal_ns.store(monotonic_ns());
}

// A signal our own handler took: the process dies of it once the report is out.
std::atomic<int> g_fatal_signal{0};

// ---- An uncaught exception ----
//
// The exception that ended the run, for the report's `exception`: noted by
// note_uncaught_exception (the Python package's exit hook passes the one
// Python printed; on_terminate the one std::terminate was called for). The
// first one only; static storage, no allocation, no lock: state goes
// 0 (none) -> 1 (being written) -> 2 (readable).
struct ExceptionNote {
  std::atomic<int> state{0};
  char type[kExceptionTypeBytes + 1];
  char message[kExceptionMessageBytes + 1];
  std::uint64_t ns;
};
ExceptionNote g_exception;

// The first line of `text`, at most `bytes` bytes (printable() escapes the
// rest when the report is built).
void copy_first_line(char* to, const char* text, std::size_t bytes) noexcept {
  std::size_t n = 0;
  if (text != nullptr)
    for (; n < bytes && text[n] != '\0' && text[n] != '\n' && text[n] != '\r'; ++n) to[n] = text[n];
  to[n] = '\0';
}

// ---- std::terminate ----
//
// An exception that escapes main (or a thread's function, or a noexcept
// function) calls std::terminate, then std::abort: no exit handler runs and
// the last snapshot was all that remained, with nothing saying why. With
// STEPSCOPE_SIGNALS on, the collector installs on_terminate in front of the
// process's terminate handler: it notes the exception in flight (demangled
// type, what()), asks the collector thread for the final report as a signal
// does (ended_by "terminate"), waits for it at most kSignalReportBudgetMs,
// then calls the handler it replaced (std::abort by default), so the
// program ends exactly as it would have. A terminate on the collector thread
// itself, or after the final report, only chains.
void note_current_exception() noexcept {
  std::exception_ptr current = std::current_exception();
  if (!current) return;  // std::terminate() called directly, or a joinable std::thread destroyed
  char type[kExceptionTypeBytes + 1] = "(unknown type)";
  const char* message = "";
  if (const std::type_info* info = abi::__cxa_current_exception_type()) {
    int status = -1;
    // Allocates (malloc): after std::bad_alloc it may fail, and the mangled name is kept.
    char* demangled = abi::__cxa_demangle(info->name(), nullptr, nullptr, &status);
    copy_first_line(type, status == 0 && demangled != nullptr ? demangled : info->name(), kExceptionTypeBytes);
    std::free(demangled);
  }
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  note_uncaught_exception(type, message);
}

// Async-signal-safe, from the thread that is ending the process: asks the
// collector thread for the final report (ended_by from `pending`, as in
// g_pending_signal) unless another ending is under way, and waits at most
// kSignalReportBudgetMs for whichever report is being written (a crash during
// the exit's report lets it finish). Before the collector is published the
// request waits for it (start_collector stops the loop it has not begun);
// nothing on the collector thread (it would wait on itself).
void request_final_report(int pending) noexcept {
  if (g_collector_tid.load() == static_cast<long>(::syscall(SYS_gettid))) return;
  int none = 0;
  if (g_final_state.load() == kFinalNone && g_pending_signal.compare_exchange_strong(none, pending))
    if (Collector* collector = g_signal_collector.load()) collector->request_stop();
  wait_for_final_report_or_clean_up();
}

// ---- Crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP) ----
//
// The crashing thread asks the collector thread - a healthy thread with its
// own data - for the final report (ended_by "SIGSEGV", ...), waits for it at
// most kSignalReportBudgetMs, then restores SIG_DFL and re-raises: the core
// dump and the exit status are the crash's as without stepscope. The report
// is written to a temporary file and renamed, so a writer that dies halfway
// (a heap the crash corrupted) leaves the last snapshot in place. A crash on
// the collector thread only re-raises; during another ending it waits for
// that report first. SIGABRT after on_terminate finds its report written.

// From a handler of ours, after its report: the signal's default action
// back, and the signal again. Blocked while the handler runs, it is
// delivered with that action (the process ends) as soon as the handler
// returns; a fault also re-executes its instruction, which faults again.
void reraise_with_default_action(int sig) noexcept {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(sig, &default_action, nullptr);
  ::raise(sig);
}

void on_crash_signal(int sig) {
  const int saved_errno = errno;
  request_final_report(sig);
  reraise_with_default_action(sig);
  errno = saved_errno;
}

// ---- Termination signals ----
//
// The handler only does async-signal-safe things: it records the signal,
// wakes the collector thread (atomic store + futex wake), waits on a futex
// for the final report at most kSignalReportBudgetMs, removes a half-written
// temporary file if time ran out, then restores SIG_DFL and re-raises, so the
// exit status is 128 + signal as without stepscope. The collector thread,
// which blocks these signals, writes the final report. SIGPIPE: the report
// never goes back to the pipe that raised it in a loop, as every writer
// blocks the termination set and a write to a closed pipe then fails with
// EPIPE (the report falls back to a file).
void on_termination_signal(int sig) {
  const int saved_errno = errno;
  note_signal(sig);
  int none = 0;
  (void)g_fatal_signal.compare_exchange_strong(none, sig);
  none = 0;
  (void)g_pending_signal.compare_exchange_strong(none, sig);
  if (Collector* collector = g_signal_collector.load()) collector->request_stop();
  wait_for_final_report_or_clean_up();
  reraise_with_default_action(sig);
  errno = saved_errno;
}

// ---- Observed handlers (the Python package) ----
//
// Python owns SIGINT: its handler turns Ctrl-C into KeyboardInterrupt, which
// a program or a library may catch. torch.multiprocessing.spawn's workers
// swallow it and exit normally, Lightning shuts down "gracefully", scripts
// catch it to save a checkpoint: the run then ends by a normal exit and its
// report said nothing of the Ctrl-C. For a Python run the collector puts a
// thin handler in front of each termination signal's C handler that is
// neither SIG_DFL (those get on_termination_signal) nor SIG_IGN: it notes
// the signal, then calls the handler it stands in front of with the same
// arguments, so Python (or whoever installed it) behaves exactly as before.
// A later signal.signal() replaces it, which only ends the observation.
// Handlers with SA_RESETHAND (one-shot) are left alone.
struct sigaction g_observed_previous[NSIG];  // written before the handler that reads it is installed

void on_observed_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  note_signal(sig);
  errno = saved_errno;
  const struct sigaction& previous = g_observed_previous[sig];
  if ((previous.sa_flags & SA_SIGINFO) != 0) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(sig);
  }
}

// Installs `handler` for `sig` when its disposition is SIG_DFL, with the
// termination signals blocked while it runs (one ending at a time per
// thread). True when installed.
bool install_if_default(int sig, void (*handler)(int), int flags) noexcept {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) != 0) return false;
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return false;
  struct sigaction ours {};
  ours.sa_handler = handler;
  ours.sa_mask = termination_set();
  ours.sa_flags = flags;
  return ::sigaction(sig, &ours, nullptr) == 0;
}

}  // namespace

void set_final_state(FinalState state) noexcept {
  g_final_state.store(state, std::memory_order_release);
  futex_wake_all(g_final_state);
}

// Async-signal-safe (monotonic_ns is clock_gettime).
bool wait_for_final_report(long budget_ms) noexcept {
  const std::int64_t deadline = static_cast<std::int64_t>(monotonic_ns()) + budget_ms * 1000000;
  for (;;) {
    const std::uint32_t state = g_final_state.load(std::memory_order_acquire);
    if (state == kFinalWritten) return true;
    if (state == kFinalAbandoned) return false;
    const std::int64_t left = deadline - static_cast<std::int64_t>(monotonic_ns());
    if (left <= 0) return false;
    // At most 50 ms at a time: a wake between the load and the wait is not lost for long.
    const std::int64_t wait_ns = left < 50000000 ? left : 50000000;
    const timespec timeout{static_cast<time_t>(wait_ns / 1000000000), static_cast<long>(wait_ns % 1000000000)};
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&g_final_state), FUTEX_WAIT_PRIVATE, state, &timeout, nullptr,
              0);
  }
}

void note_uncaught_exception(const char* type, const char* message) noexcept {
  int none = 0;
  if (!g_exception.state.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) return;  // the first only
  g_exception.ns = monotonic_ns();
  copy_first_line(g_exception.type, type != nullptr && type[0] != '\0' ? type : "(unknown type)", kExceptionTypeBytes);
  copy_first_line(g_exception.message, message, kExceptionMessageBytes);
  g_exception.state.store(2, std::memory_order_release);
}

bool noted_exception(std::string& type, std::string& message, std::uint64_t& ns) {
  if (g_exception.state.load(std::memory_order_acquire) != 2) return false;
  type = g_exception.type;
  message = g_exception.message;
  ns = g_exception.ns;
  return true;
}

bool sigpipe_pending() noexcept {
  sigset_t pending;
  return ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

void consume_own_sigpipe(bool was_pending) noexcept {
  if (was_pending || !sigpipe_pending()) return;
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  const timespec zero{0, 0};
  (void)::sigtimedwait(&pipe_only, nullptr, &zero);
}

int fatal_signal_now() noexcept {
  if (const int sig = g_fatal_signal.load(); sig != 0) return sig;
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGPIPE || sigismember(&pending, sig) != 1 || !is_termination_signal(sig)) continue;
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
        current.sa_handler == on_termination_signal)
      return sig;
  }
  return 0;
}

const char* ending_name(int pending) noexcept {
  if (pending == kTerminateEnding) return "terminate";
  static const SignalNames names;
  return pending > 0 && pending < NSIG ? names.name[pending] : "";
}

void block_termination_signals(sigset_t* previous) noexcept {
  const sigset_t set = termination_set();
  ::pthread_sigmask(SIG_BLOCK, &set, previous);
}

void install_signal_handlers() noexcept {
  (void)ending_name(0);  // the names table (snprintf into static storage), built here rather than in a handler
  for (int sig = 1; sig < NSIG; ++sig)
    if (is_termination_signal(sig)) (void)install_if_default(sig, on_termination_signal, SA_RESTART);
  // On the thread's alternate stack when it has one (a stack overflow leaves no room on its own).
  for (int sig : kCrashSignals) (void)install_if_default(sig, on_crash_signal, SA_RESTART | SA_ONSTACK);
}

// Collector thread, after install_signal_handlers.
void observe_signal_handlers() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (!is_termination_signal(sig)) continue;
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    const bool siginfo = (current.sa_flags & SA_SIGINFO) != 0;
    if (siginfo ? current.sa_sigaction == on_observed_signal
                : (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN ||
                   current.sa_handler == on_termination_signal))
      continue;
    if ((current.sa_flags & SA_RESETHAND) != 0) continue;
    g_observed_previous[sig] = current;
    struct sigaction ours {};
    ours.sa_sigaction = on_observed_signal;
    ours.sa_mask = current.sa_mask;
    ours.sa_flags = SA_SIGINFO | (current.sa_flags & (SA_ONSTACK | SA_RESTART | SA_NODEFER));
    (void)::sigaction(sig, &ours, nullptr);
  }
}

void say_nothing_was_recorded(const char* how) noexcept {
  if (!read_early_settings().quiet)
    std::fprintf(stderr, "stepscope: no report: the program ended%s before its first step; nothing was recorded\n",
                 how);
}

void on_terminate() noexcept {
  static std::atomic<bool> entered{false};
  if (!entered.exchange(true)) {
    if (g_mode.load() == kModeUninitialised) {
      // Installed when the library was loaded; the first scope never came:
      // no collector to ask for a report.
      say_nothing_was_recorded(" by an uncaught exception");
    } else {
      note_current_exception();
      request_final_report(kTerminateEnding);
    }
  }
  if (const std::terminate_handler previous = g_previous_terminate.load();
      previous != nullptr && previous != on_terminate)
    previous();
  std::abort();
}

void reset_endings_in_child() noexcept {
  g_final_state.store(kFinalNone, std::memory_order_relaxed);
  g_pending_signal.store(0, std::memory_order_relaxed);
  g_first_signal.store(0, std::memory_order_relaxed);
  g_fatal_signal.store(0, std::memory_order_relaxed);
  g_exception.state.store(0, std::memory_order_relaxed);
  g_collector_tid.store(0, std::memory_order_relaxed);
  g_signal_collector.store(nullptr, std::memory_order_relaxed);
}

void forget_collector_after_fork() noexcept {
  // No collector thread here: a signal, crash or std::terminate in the child
  // must not wait for a report nobody writes (multiprocessing's
  // Pool.terminate() and Process.terminate() send SIGTERM; each child waited
  // the whole 5 s budget). reset_endings_in_child undoes both when the child records.
  g_signal_collector.store(nullptr, std::memory_order_relaxed);
  g_final_state.store(kFinalAbandoned, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
