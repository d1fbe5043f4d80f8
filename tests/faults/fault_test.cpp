// The fault suite: every way a training run ends badly, each case a real
// process (tests/core/probe.cpp) that is signalled, killed, crashes, or is
// pointed at a hostile output path. Every case here failed before the
// run time handled it (issue 13): no report, a replaced symlink, a deleted
// device node, a hang on a FIFO, overwritten ranks, temporary files left,
// a slow exit, dropped start-up records, silent forked workers.
#include <stepscope/report.hpp>

#include "tools/tool_runner.hpp"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using stepscope_test::contains;
using stepscope_test::exists;
using stepscope_test::slurp;
using stepscope_test::TempDir;

namespace {

// Sanitized probes write their ~4 MB report 10-50x slower (a TSan trial took
// 5-12 s of the CI's 2 cores: 40 trials were 4-8 minutes), so there the
// signal is tried at 10 offsets 1 ms apart instead of 20 offsets 0.5 ms
// apart, each twice.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSignalDuringWriteTrials = 10;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kSignalDuringWriteTrials = 10;
#else
constexpr int kSignalDuringWriteTrials = 40;
#endif
#else
constexpr int kSignalDuringWriteTrials = 40;
#endif

// Where a probe's stdout and stderr go: by default dir/<tag>.out and
// dir/<tag>.err; `out_fd` instead of the first (a pipe, a file opened for
// append), and stderr onto stdout as `2>&1` does.
struct ProbeOutput {
  int out_fd = -1;
  bool err_to_out = false;
};

// Starts the probe in `dir` (its working directory) with STEPSCOPE_QUIET=1,
// TMPDIR=dir and `env` ("NAME=value" each); stdout and stderr as `output` says.
pid_t start_probe(const TempDir& dir, const std::vector<std::string>& env, const std::vector<std::string>& args,
                  const std::string& tag = "probe", ProbeOutput output = {}) {
  const std::string out = dir / (tag + ".out"), err = dir / (tag + ".err");
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child: this test process is single-threaded here, so setenv is safe.
  if (::chdir(dir.path.c_str()) != 0) ::_exit(120);
  const int out_fd = output.out_fd >= 0 ? output.out_fd : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = output.err_to_out ? out_fd : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out_fd < 0 || err_fd < 0) ::_exit(121);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  ::signal(SIGPIPE, SIG_DFL);  // as a shell starts a program (ctest may run us with it ignored)
  ::setenv("STEPSCOPE_QUIET", "1", 1);
  ::setenv("STEPSCOPE_CUDA", "0", 1);
  ::setenv("TMPDIR", dir.path.c_str(), 1);
  for (const auto& e : env) {
    const auto eq = e.find('=');
    ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(STEPSCOPE_PROBE));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(STEPSCOPE_PROBE, argv.data());
  ::_exit(122);
}

// Waits for the process to end, at most timeout_s (then kills it and fails).
// Returns the raw wait status.
int wait_exit(pid_t pid, double timeout_s = 60) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the probe did not end within " << timeout_s << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

bool wait_for_file(const std::string& path, double timeout_s = 30) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool warned(const stepscope::Report& r, const std::string& text) {
  for (const auto& w : r.warnings)
    if (contains(w, text)) return true;
  return false;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

// The report at `path`; on failure, what the directory holds and what the
// probe said on stderr (STEPSCOPE_QUIET keeps only warnings there).
stepscope::Report load(const std::string& path) {
  stepscope::Report r;
  std::string error;
  const bool ok = stepscope::load_report(path, r, error);
  if (!ok) {
    const std::string dir = path.substr(0, path.rfind('/'));
    std::string listing;
    for (const std::string& name : list_dir(dir)) listing += name + " ";
    std::ifstream err(dir + "/probe.err");
    std::stringstream said;
    said << err.rdbuf();
    INFO(path << ": " << error << "\nthe directory holds: " << listing << "\nprobe.err: " << said.str());
    REQUIRE(ok);
  }
  return r;
}

const stepscope::PhaseSummary* find(const stepscope::Report& r, const std::string& name) {
  for (const auto& p : r.phases)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("SIGINT, SIGTERM and SIGHUP write the final report and keep the signal's exit status", "[faults][signals]") {
  for (const auto& [sig, name] :
       {std::pair<int, std::string>{SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}}) {
    INFO(name);
    TempDir dir;
    const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"forever"});
    REQUIRE(wait_for_file(dir / "running"));
    ::kill(pid, sig);
    const int status = wait_exit(pid);
    // Killed by the signal itself: a shell reports 128 + signal, as without stepscope.
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.complete);
    CHECK(r.ended_by == name);
    // The ending signal is also the run's first interruption, after the 20 steps the probe announced.
    REQUIRE(r.interrupted.has_value());
    CHECK(r.interrupted->signal == name);
    CHECK(r.interrupted->after_s > 0);
    CHECK(r.steps.count + r.steps.warmup_excluded >= 20);
    CHECK(r.dropped_records == 0);
  }
}

TEST_CASE("a normal exit says so in the report", "[faults][signals]") {
  TempDir dir;
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {}, {"workload", "10"}))) == 0);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK(r.complete);
  CHECK(r.ended_by == "exit");
  CHECK_FALSE(r.interrupted.has_value());
  CHECK_FALSE(r.exception.has_value());
  CHECK(r.snapshot_time_utc.empty());
}

TEST_CASE("an uncaught exception writes the final report with the exception, and the program still aborts",
          "[faults][terminate]") {
  SECTION("from main") {
    TempDir dir;
    const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_QUIET=0"}, {"throw", "300"}));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);  // as without stepscope: the default handler's abort
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.complete);
    CHECK(r.ended_by == "terminate");
    REQUIRE(r.exception.has_value());
    CHECK(r.exception->type == "std::runtime_error");
    CHECK(r.exception->message == "CUDA out of memory. Tried to allocate 2.00 GiB");  // the first line
    CHECK(r.exception->after_s > 0.2);
    CHECK(r.steps.count > 0);
    CHECK_FALSE(r.interrupted.has_value());
    // What the probe's stderr shows: the summary's first line says how the run ended.
    const std::string err = slurp(dir / "probe.err");
    CHECK(err.find("run ended by std::terminate") != std::string::npos);
    CHECK(err.find("uncaught exception std::runtime_error: CUDA out of memory") != std::string::npos);
    CHECK(err.find("stepscope: terminate: report written to") != std::string::npos);
  }
  SECTION("from a worker thread, with the program's own type") {
    TempDir dir;
    const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"throw-thread", "300"}));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.ended_by == "terminate");
    REQUIRE(r.exception.has_value());
    CHECK(r.exception->type == "probe::BadBatch");
    CHECK(r.exception->message == "batch 17 has NaN labels");
    CHECK(r.steps.count > 0);
  }
  SECTION("std::terminate() with no exception in flight") {
    TempDir dir;
    const int status =
        wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_QUIET=0"}, {"terminate", "200"}));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.complete);
    CHECK(r.ended_by == "terminate");
    CHECK_FALSE(r.exception.has_value());
    CHECK(slurp(dir / "probe.err").find("no exception in flight") != std::string::npos);
  }
}

TEST_CASE("a program that ends before its first step is told that nothing was recorded", "[faults][terminate]") {
  SECTION("an uncaught exception, with or without a call of the API before: the line, then the abort as before") {
    const std::string how = GENERATE(as<std::string>{}, "throw", "throw-bare");
    TempDir dir;
    const int status = wait_exit(start_probe(dir, {"STEPSCOPE_QUIET=0"}, {"early-end", how}));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    const std::string err = slurp(dir / "probe.err");
    CHECK(err.find("stepscope: no report: the program ended by an uncaught exception before its first step; "
                   "nothing was recorded") != std::string::npos);
    CHECK(err.find("Error opening images file") != std::string::npos);  // the C++ runtime's own message still
    CHECK(::access((dir / "stepscope-report.json").c_str(), F_OK) != 0);
  }
  SECTION("exit") {
    TempDir dir;
    const int status = wait_exit(start_probe(dir, {"STEPSCOPE_QUIET=0"}, {"early-end", "exit"}));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(slurp(dir / "probe.err").find("stepscope: no report: the program ended before its first step") !=
          std::string::npos);
  }
  SECTION("quiet, or stepscope off: nothing said") {
    for (const char* env : {"STEPSCOPE_QUIET=1", "STEPSCOPE=0"}) {
      TempDir dir;
      INFO(env);
      const int status = wait_exit(start_probe(dir, {env}, {"early-end", "exit"}));
      REQUIRE(WIFEXITED(status));
      CHECK(slurp(dir / "probe.err").find("stepscope:") == std::string::npos);
    }
  }
}

TEST_CASE("an application's own terminate handler still runs after the report", "[faults][terminate]") {
  TempDir dir;
  const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"own-terminate", "200"}));
  // Installed before stepscope started: stepscope's stands in front of it and then calls it.
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 9);
  CHECK(::access((dir / "own-terminate").c_str(), F_OK) == 0);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK(r.ended_by == "terminate");
  REQUIRE(r.exception.has_value());
  CHECK(r.exception->type == "std::runtime_error");
}

TEST_CASE("STEPSCOPE_SIGNALS=0 leaves std::terminate alone: the last snapshot remains", "[faults][terminate]") {
  TempDir dir;
  const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SIGNALS=0", "STEPSCOPE_SNAPSHOT_S=0.1"}, {"throw", "600"}));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK_FALSE(r.complete);
  CHECK_FALSE(r.exception.has_value());
}

TEST_CASE("an application's own SIGTERM handler is left alone, installed before or after stepscope starts",
          "[faults][signals]") {
  for (const std::string when : {"before", "after"}) {
    INFO(when);
    TempDir dir;
    const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"own-handler", when});
    REQUIRE(wait_for_file(dir / "running"));
    ::kill(pid, SIGTERM);
    const int status = wait_exit(pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 7);  // the application's handler ran and chose the ending
    CHECK(exists(dir / "own-handler"));
    CHECK_FALSE(exists(dir / "stepscope-report.json"));  // it _exit()ed: no report asked for
  }
}

TEST_CASE("STEPSCOPE_SIGNALS=0 leaves the signals alone", "[faults][signals]") {
  TempDir dir;
  const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_SIGNALS=0"}, {"forever"});
  REQUIRE(wait_for_file(dir / "running"));
  ::kill(pid, SIGTERM);
  const int status = wait_exit(pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(exists(dir / "stepscope-report.json"));
}

TEST_CASE("SIGKILL after a snapshot interval leaves a parseable, incomplete report", "[faults][snapshot]") {
  TempDir dir;
  const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0.2"}, {"forever"});
  REQUIRE(wait_for_file(dir / "stepscope-report.json"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGKILL);
  const int status = wait_exit(pid);
  REQUIRE(WIFSIGNALED(status));
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK_FALSE(r.complete);
  CHECK(r.ended_by.empty());
  CHECK_FALSE(r.snapshot_time_utc.empty());
  CHECK(r.total_records > 0);
  // What `stepscope show` prints of it says first that the run never ended by itself.
  CHECK(stepscope::format_summary(r).find("snapshot of a run still going at " + r.snapshot_time_utc) !=
        std::string::npos);
  // SIGKILL cannot be caught: one that lands inside a snapshot's write leaves
  // that write's temporary file (the report beside it is the previous, whole
  // snapshot). At most that one, named for the killed process.
  int temps = 0;
  for (const auto& name : list_dir(dir.path)) {
    if (!contains(name, "tmp")) continue;
    ++temps;
    CHECK(name.rfind("stepscope-report.json.stepscope-tmp." + std::to_string(pid) + ".", 0) == 0);
  }
  CHECK(temps <= 1);
}

TEST_CASE("abort() writes the final report, and the process still dies of SIGABRT", "[faults][crash]") {
  TempDir dir;
  const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_QUIET=0"}, {"abort", "300"}));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK(r.complete);
  CHECK(r.ended_by == "SIGABRT");
  CHECK(r.steps.count > 0);
  CHECK_FALSE(r.exception.has_value());
  CHECK(slurp(dir / "probe.err").find("run ended by SIGABRT (abort(): a failed assertion") != std::string::npos);
}

TEST_CASE("a segmentation fault writes the final report, and the process still dies of SIGSEGV", "[faults][crash]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's own SIGSEGV handler is in place: stepscope leaves it alone (the last snapshot remains).
  SUCCEED("SIGSEGV belongs to the sanitizer in this build");
#else
  TempDir dir;
  const int status = wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"segv", "300"}));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);  // the fault re-raised with its default action: a core dump where enabled
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK(r.complete);
  CHECK(r.ended_by == "SIGSEGV");
  CHECK(r.steps.count > 0);
#endif
}

TEST_CASE("STEPSCOPE_SIGNALS=0 leaves crashes alone: abort() leaves the last snapshot", "[faults][snapshot]") {
  TempDir dir;
  const int status =
      wait_exit(start_probe(dir, {"STEPSCOPE_SIGNALS=0", "STEPSCOPE_SNAPSHOT_S=0.2"}, {"abort", "1500"}));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK_FALSE(r.complete);
  CHECK(r.steps.count > 0);
}

TEST_CASE("a symlink as the output is written through; the link stays a link", "[faults][paths]") {
  TempDir dir;
  stepscope_test::spit(dir / "target.json", "old contents\n");
  struct stat before {};
  REQUIRE(::stat((dir / "target.json").c_str(), &before) == 0);
  const ino_t target_inode = before.st_ino;
  REQUIRE(::symlink("target.json", (dir / "link.json").c_str()) == 0);
  REQUIRE(::symlink("new.json", (dir / "dangling.json").c_str()) == 0);
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_OUT=link.json"}, {"workload", "10"}))) == 0);
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_OUT=dangling.json"}, {"workload", "10"}))) == 0);
  struct stat st {};
  REQUIRE(::lstat((dir / "link.json").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  REQUIRE(::lstat((dir / "dangling.json").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(load(dir / "target.json").steps.count == 5);
  CHECK(load(dir / "new.json").steps.count == 5);
  // Written in place through the link: no temporary file renamed over its target.
  struct stat after {};
  REQUIRE(::stat((dir / "target.json").c_str(), &after) == 0);
  CHECK(after.st_ino == target_inode);
}

TEST_CASE("/dev/stdout redirected to a file receives the report", "[faults][paths]") {
  TempDir dir;
  // stdout is dir/probe.out, a regular file: /dev/stdout -> /proc/self/fd/1 -> it.
  // Snapshots are due during the run: renaming one over the file would leave
  // stdout on a deleted file and the final report would be lost.
  REQUIRE(WEXITSTATUS(wait_exit(
              start_probe(dir, {"STEPSCOPE_OUT=/dev/stdout", "STEPSCOPE_SNAPSHOT_S=0.1"}, {"workload", "400"}))) == 0);
  stepscope::Report r;
  std::string error;
  INFO(error);
  REQUIRE(stepscope::report_from_json(slurp(dir / "probe.out"), r, error));
  CHECK(r.complete);
  CHECK(r.steps.count == 395);
}

TEST_CASE("a device that fails the write is not deleted; the reason is in the warnings", "[faults][paths]") {
  TempDir dir;
  // A private copy of /dev/full (char 1:7): the test must not risk the real one.
  const std::string full = dir / "full";
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    WARN("cannot create a device node here (not root?): skipped");
    return;
  }
  REQUIRE(WEXITSTATUS(wait_exit(
              start_probe(dir, {"STEPSCOPE_OUT=report.json", "STEPSCOPE_TRACE=1-3", "STEPSCOPE_TRACE_OUT=" + full},
                          {"workload", "10"}))) == 0);
  struct stat st {};
  REQUIRE(::stat(full.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  const stepscope::Report r = load(dir / "report.json");
  CHECK(warned(r, "cannot write the trace"));
  CHECK(warned(r, "No space left on device"));

  // The report itself to the device: it falls back, with the reason.
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_OUT=" + full}, {"workload", "10"}))) == 0);
  REQUIRE(::stat(full.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  const std::string err = slurp(dir / "probe.err");
  CHECK(contains(err, "No space left on device"));
  bool fallback_found = false;
  for (const auto& name : list_dir(dir.path))
    if (name.rfind("stepscope-report.", 0) == 0 && contains(name, ".json") && !contains(name, "trace")) {
      fallback_found = true;
      CHECK(warned(load(dir / name), "No space left on device"));
    }
  CHECK(fallback_found);
}

TEST_CASE("snapshots of a report whose path cannot be written go to the private fallback file", "[faults][paths]") {
  // A crash must still leave a report: snapshots do not stop at the first failure.
  TempDir dir;
  const std::string wanted = dir / "missing/report.json";  // its folder does not exist
  const pid_t pid =
      start_probe(dir, {"STEPSCOPE_OUT=" + wanted, "STEPSCOPE_SNAPSHOT_S=0.1", "STEPSCOPE_QUIET=0"}, {"forever"});
  std::string err;
  for (int i = 0; i < 3000 && !contains(err = slurp(dir / "probe.err"), "snapshots go to '"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  INFO(err);
  const auto at = err.find("snapshots go to '");
  REQUIRE(at != std::string::npos);
  const std::string fallback = err.substr(at + 17, err.find('\'', at + 17) - (at + 17));
  CHECK(fallback.rfind(dir.path + "/stepscope-report.", 0) == 0);  // $TMPDIR
  std::this_thread::sleep_for(std::chrono::milliseconds(300));     // a later snapshot replaces it
  ::kill(pid, SIGKILL);
  REQUIRE(WIFSIGNALED(wait_exit(pid)));
  const stepscope::Report r = load(fallback);
  CHECK_FALSE(r.complete);
  CHECK(r.total_records > 0);
  struct stat st {};
  REQUIRE(::stat(fallback.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // Said once, however many snapshots went there.
  err = slurp(dir / "probe.err");
  CHECK(err.find("snapshots go to '") == err.rfind("snapshots go to '"));
}

TEST_CASE("a FIFO with no reader: no hang, a fallback report and a warning", "[faults][paths]") {
  TempDir dir;
  const std::string fifo = dir / "report.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int status = wait_exit(start_probe(dir, {"STEPSCOPE_OUT=" + fifo}, {"workload", "10"}), 30);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  const std::string err = slurp(dir / "probe.err");
  CHECK(contains(err, "no reader"));
  const auto at = err.find("writing it to '");
  REQUIRE(at != std::string::npos);
  const std::string fallback = err.substr(at + 15, err.find('\'', at + 15) - (at + 15));
  CHECK(load(fallback).steps.count == 5);
}

TEST_CASE("ranks of a multi-rank run without {rank} in STEPSCOPE_OUT each keep their report", "[faults][paths]") {
  TempDir dir;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 4; ++rank)
    pids.push_back(start_probe(dir, {"RANK=" + std::to_string(rank), "WORLD_SIZE=4", "STEPSCOPE_OUT=out/report.json"},
                               {"workload", "10"}, "rank" + std::to_string(rank)));
  ::mkdir((dir / "out").c_str(), 0755);  // before any report is written (they run 10 steps first)
  for (pid_t pid : pids) CHECK(WEXITSTATUS(wait_exit(pid)) == 0);
  for (int rank = 0; rank < 4; ++rank) {
    const stepscope::Report r = load(dir / ("out/report.rank" + std::to_string(rank) + ".json"));
    CHECK(r.run.rank == rank);
    CHECK(warned(r, "no {rank} placeholder"));
  }
  CHECK_FALSE(exists(dir / "out/report.json"));
}

TEST_CASE("SIGTERM during the report write leaves no temporary files", "[faults][signals]") {
  TempDir dir;
  int written = 0, trials = 0;
  for (int trial = 0; trial < kSignalDuringWriteTrials; ++trial) {
    ::unlink((dir / "running").c_str());
    ::unlink((dir / "stepscope-report.json").c_str());
    const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"big-exit", "3000"});
    REQUIRE(wait_for_file(dir / "running"));
    // From right away to well into the write of the ~4 MB report: offsets
    // spread evenly over 0 to 9.5 ms.
    std::this_thread::sleep_for(std::chrono::microseconds(500 * ((trial * 20 / kSignalDuringWriteTrials) % 20)));
    ::kill(pid, SIGTERM);
    (void)wait_exit(pid);
    ++trials;
    for (const auto& name : list_dir(dir.path)) {
      INFO("trial " << trial << ": " << name);
      CHECK_FALSE(contains(name, "tmp"));
    }
    if (exists(dir / "stepscope-report.json")) {
      ++written;
      stepscope::Report r;
      std::string error;
      INFO(error);
      CHECK(stepscope::report_from_json(slurp(dir / "stepscope-report.json"), r, error));
    }
  }
  CHECK(trials == kSignalDuringWriteTrials);
  CHECK(written > 0);  // the final report (at exit, or the one the signal asked for)
}

TEST_CASE("exit is quick after a flood of background records at the largest ring size", "[faults][exit]") {
  TempDir dir;
  // A collector that drains once a second: the whole flood is drained at
  // exit, as when a busy collector falls behind (issue 13's case).
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = start_probe(
      dir, {"STEPSCOPE_RING_RECORDS=4194304", "STEPSCOPE_INTERVAL_MS=1000", "STEPSCOPE_SNAPSHOT_S=0"}, {"flood"});
  // Before: 20.1 s from the end of the work to the exit on this machine
  // (12.9 s in the issue), in Aggregator::overlap_with_steps: each of the ~1M
  // background records scanned every step kept (4096). Now each record is a
  // binary search: 0.37-0.43 s with the machine loaded 4x. The bound leaves
  // 10x of that for a busier machine and is still 4x below the old cost.
  while (!contains(slurp(dir / "probe.out"), "work-done")) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, WNOHANG) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto work_done = std::chrono::steady_clock::now();
  const int status = wait_exit(pid);
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - work_done).count();
  const double work_s = std::chrono::duration<double>(work_done - started).count();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Against the run's own start-up and flood, not the clock alone: under ASan
  // beside another sanitizer test the exit took 11.2 s (3 s for the whole
  // test when quiet; quiet -O2: 0.6-0.7 s after 0.5). The quadratic drain
  // took 20 s after ~1 s of work: 6x still catches it.
  INFO("exit " << exit_s << " s after " << work_s << " s of start-up and flood");
  CHECK(exit_s < std::max(5.0, 6.0 * work_s));
  const stepscope::Report r = load(dir / "stepscope-report.json");
  const auto* flood = find(r, "flood");
  REQUIRE(flood);
  CHECK(flood->overlap_with_steps.has_value());
  CHECK(flood->count > 0);
  CHECK(r.system.collector_cpu_ms > 0);
}

TEST_CASE("a burst of 100,000 records at start-up loses none", "[faults][startup]") {
  TempDir dir;
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_WARMUP=0"}, {"burst", "100000"}))) == 0);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK(r.dropped_records == 0);
  CHECK(r.total_records == 100000);
  const auto* burst = find(r, "burst");
  REQUIRE(burst);
  CHECK(burst->count == 100000);
}

// The collector's snapshot stuck in stat() on a hung network mount (the
// report's directory): a fork (a DataLoader's next epoch) must not wait for
// it. It did: the snapshot held the run time's lock through the path's file
// system calls and the report's build, and before_fork takes that lock.
TEST_CASE("a snapshot stuck on a hung file system does not hold up fork()", "[faults][fork][hung-fs]") {
  TempDir dir;
  const std::string mark = dir / "stuck";
  const pid_t pid =
      start_probe(dir,
                  {"LD_PRELOAD=" STEPSCOPE_HUNG_FS, "HUNG_FS_DIR=" + (dir / "hung"), "HUNG_FS_MARK=" + mark,
                   "STEPSCOPE_OUT=" + (dir / "hung/r.json"), "STEPSCOPE_SNAPSHOT_S=0.2",
                   // The shim comes before an ASan build's runtime in the library list.
                   "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0"},
                  {"fork-when-hung"});
  const int status = wait_exit(pid, 60);
  INFO(slurp(dir / "probe.err"));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 4);  // the snapshot got stuck, as the case needs
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(dir / "probe.out") == "forked\n");
}

// STEPSCOPE_OUT naming a character device whose blocking open() waits, as a
// serial line without carrier does (the shim makes /dev/null one): the
// report is written with a non-blocking open and the run ends. It hung at exit.
TEST_CASE("a report to a device whose open would block does not hold up the exit", "[faults][hung-fs]") {
  TempDir dir;
  const pid_t pid = start_probe(dir,
                                {"LD_PRELOAD=" STEPSCOPE_HUNG_FS, "NO_CARRIER_DEV=/dev/null", "STEPSCOPE_OUT=/dev/null",
                                 "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0"},
                                {"workload", "50"});
  const int status = wait_exit(pid, 60);
  INFO(slurp(dir / "probe.err"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(contains(slurp(dir / "probe.err"), "cannot write"));
}

// The collector thread stuck in its start-up (a device probe hung in the
// driver; here the shim hangs its first /proc read): the exit waits a bounded
// time for it (STEPSCOPE_START_WAIT_S, 30 s by default; 2 s here), then says
// why there is no report. It waited forever.
TEST_CASE("a collector stuck starting does not hold up the exit", "[faults][hung-fs]") {
  TempDir dir;
  const std::string mark = dir / "stuck";
  const pid_t pid = start_probe(dir,
                                {"LD_PRELOAD=" STEPSCOPE_HUNG_FS, "HUNG_FS_DIR=/proc/self/", "HUNG_FS_MARK=" + mark,
                                 "STEPSCOPE_QUIET=0", "STEPSCOPE_START_WAIT_S=2", "STEPSCOPE_OUT=" + (dir / "r.json"),
                                 "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0"},
                                {"workload", "50"});
  const auto started = std::chrono::steady_clock::now();
  const int status = wait_exit(pid, 60);
  const auto waited = std::chrono::steady_clock::now() - started;
  const std::string err = slurp(dir / "probe.err");
  INFO(err);
  REQUIRE(exists(mark));  // the start-up did get stuck, as the case needs
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(err, "the collector thread did not start within 2 s"));
  CHECK(waited < std::chrono::seconds(30));  // the bound set, not the default
  CHECK_FALSE(exists(dir / "r.json"));
}

// glibc does not reset its exit-handler lock in a child: a fork while the
// collector thread registers its exit handler (or the device runtime its own)
// left a DataLoader worker hung at its first atexit(). The fork waits for the
// start; here the start is slowed by a second on its reads of /proc/self.
TEST_CASE("a fork while the collector is starting waits for the start", "[faults][fork][hung-fs]") {
  TempDir dir;
  const std::string mark = dir / "slow";
  const pid_t pid = start_probe(
      dir,
      {"LD_PRELOAD=" STEPSCOPE_HUNG_FS, "HUNG_FS_DIR=/proc/self/", "HUNG_FS_FOR_MS=1000", "HUNG_FS_MARK=" + mark,
       "STEPSCOPE_OUT=" + (dir / "r.json"), "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0"},
      {"fork-at-start"});
  const int status = wait_exit(pid, 60);
  INFO(slurp(dir / "probe.err"));
  REQUIRE(exists(mark));  // the start did read /proc/self, slowly, as the case needs
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(slurp(dir / "probe.out"), "start-over-at-fork=1"));
  CHECK(load(dir / "r.json").steps.count + load(dir / "r.json").steps.warmup_excluded == 21);
}

TEST_CASE("workers forked before the first scope: one line says they are not recorded", "[faults][fork]") {
  TempDir dir;
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {}, {"fork-early", "2"}))) == 0);
  const std::string err = slurp(dir / "probe.err");
  std::size_t lines = 0;
  for (auto at = err.find("is a forked child: its phases are not recorded"); at != std::string::npos;
       at = err.find("is a forked child: its phases are not recorded", at + 1))
    ++lines;
  CHECK(lines == 2);  // one per child
  for (const auto& name : list_dir(dir.path)) CHECK_FALSE(contains(name, "stepscope-report"));
}

TEST_CASE("STEPSCOPE_CHILDREN=1: each forked child writes its own report, named with its pid", "[faults][fork]") {
  TempDir dir;
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_CHILDREN=1"}, {"fork-early", "2"}))) == 0);
  int reports = 0;
  for (const auto& name : list_dir(dir.path)) {
    if (name.rfind("stepscope-report.pid", 0) != 0) continue;
    ++reports;
    const stepscope::Report r = load(dir / name);
    CHECK(name == "stepscope-report.pid" + std::to_string(r.run.pid) + ".json");
    CHECK(r.steps.count + r.steps.warmup_excluded == 30);
    CHECK(r.ended_by == "exit");
  }
  CHECK(reports == 2);
}

TEST_CASE("STEPSCOPE_CHILDREN=1 with a parent already recording: both reports, nothing mixed", "[faults][fork]") {
  TempDir dir;
  // probe fork: 20 steps, fork; the child runs 20 steps and exits; the parent 20 more.
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_CHILDREN=1"}, {"fork"}))) == 0);
  const stepscope::Report parent = load(dir / "stepscope-report.json");
  CHECK(parent.steps.count + parent.steps.warmup_excluded == 40);
  int children = 0;
  for (const auto& name : list_dir(dir.path)) {
    if (name.rfind("stepscope-report.pid", 0) != 0) continue;
    ++children;
    const stepscope::Report child = load(dir / name);
    CHECK(child.run.pid != parent.run.pid);
    CHECK(child.steps.count + child.steps.warmup_excluded == 20);
    CHECK(child.dropped_records == 0);
  }
  CHECK(children == 1);
}

TEST_CASE("STEPSCOPE_CHILDREN=1, forked inside a step and phase (a DataLoader worker): the child's own steps",
          "[faults][fork]") {
  // Before: the forking thread kept the parent's ring (scopes were open
  // across the fork), which nobody in the child drained: no child report.
  TempDir dir;
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_CHILDREN=1"}, {"fork-in-step"}))) == 0);
  INFO(slurp(dir / "probe.err"));  // the child's last words when it left no report
  const stepscope::Report parent = load(dir / "stepscope-report.json");
  CHECK(parent.steps.count + parent.steps.warmup_excluded == 41);
  int children = 0;
  for (const auto& name : list_dir(dir.path)) {
    if (name.rfind("stepscope-report.pid", 0) != 0) continue;
    ++children;
    const stepscope::Report child = load(dir / name);
    CHECK(child.steps.count + child.steps.warmup_excluded == 20);
    // Its phases are its steps' own, not nested in the parent's open step.
    for (const auto& p : child.phases)
      if (p.name == "forward") CHECK(p.count == child.steps.count);
  }
  CHECK(children == 1);
}

// ---- Issue 29: outputs, endings, signals ----

namespace {

// The name the report gives a signal: "SIG" + the kernel's abbreviation, or SIGRTMIN+N.
std::string signal_name(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX)
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return std::string("SIG") + ::sigabbrev_np(sig);
}

}  // namespace

TEST_CASE("every signal whose default action ends the process writes the final report", "[faults][signals]") {
  // Before: SIGQUIT (Ctrl-\), SIGPIPE, SIGUSR1, SIGALRM... left no report at all.
  std::vector<int> signals = {SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
                              SIGXCPU, SIGXFSZ, SIGPWR,  SIGIO,   SIGSYS,  SIGTRAP,   SIGRTMIN + 2};
#ifdef SIGSTKFLT
  signals.push_back(SIGSTKFLT);
#endif
  for (const int sig : signals) {
    const std::string name = signal_name(sig);
    INFO(name);
    TempDir dir;
    const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"forever"});
    REQUIRE(wait_for_file(dir / "running"));
    ::kill(pid, sig);
    const int status = wait_exit(pid);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);  // the exit status is the signal's, as without stepscope
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.complete);
    CHECK(r.ended_by == name);
    CHECK(r.steps.count + r.steps.warmup_excluded >= 20);
  }
}

TEST_CASE("a signal in the first step, before the collector thread runs, still writes the final report",
          "[faults][signals]") {
  // Before: the collector thread installed the handlers; on a loaded machine
  // (CI, under ASan) a signal 20 steps in came before it ran: no report.
  for (const int sig : {SIGTERM, SIGTRAP}) {
    const std::string name = signal_name(sig);
    INFO(name);
    TempDir dir;
    const int status =
        wait_exit(start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0"}, {"signal-at-start", std::to_string(sig)}));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK(r.ended_by == name);
    CHECK(r.steps.count + r.steps.warmup_excluded == 1);
  }
}

TEST_CASE("a closed stdout pipe (./train | head): SIGPIPE writes the report once, even to that pipe",
          "[faults][signals]") {
  for (const bool report_to_pipe : {false, true}) {
    INFO("STEPSCOPE_OUT=/dev/stdout: " << report_to_pipe);
    TempDir dir;
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);  // the probe holds no read end (dup2 onto stdout keeps the write end)
    std::vector<std::string> env = {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_QUIET=0"};
    if (report_to_pipe) env.push_back("STEPSCOPE_OUT=/dev/stdout");
    const pid_t pid = start_probe(dir, env, {"chatty"}, "probe", ProbeOutput{fds[1], false});
    ::close(fds[1]);
    REQUIRE(wait_for_file(dir / "running"));
    char buf[256];
    REQUIRE(::read(fds[0], buf, sizeof buf) > 0);  // what `head` reads before it exits
    ::close(fds[0]);
    const int status = wait_exit(pid, 30);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGPIPE);
    const std::string err = slurp(dir / "probe.err");
    INFO(err);
    CHECK(contains(err, "stepscope: SIGPIPE: report written to"));
    std::string path = dir / "stepscope-report.json";
    if (report_to_pipe) {  // the pipe is closed: the fallback file, said once
      const auto at = err.find("writing it to '");
      REQUIRE(at != std::string::npos);
      path = err.substr(at + 15, err.find('\'', at + 15) - (at + 15));
      CHECK(err.find("writing it to '", at + 1) == std::string::npos);
    }
    const stepscope::Report r = load(path);
    CHECK(r.ended_by == "SIGPIPE");
  }
}

TEST_CASE("a run that dies in its first seconds without a handler (_exit, SIGKILL) leaves a snapshot",
          "[faults][snapshot]") {
  // Default STEPSCOPE_SNAPSHOT_S (10 s): the first snapshot used to come only
  // then, so a run killed sooner left no file at all.
  TempDir dir;
  const int status = wait_exit(start_probe(dir, {}, {"exit-after", "3000"}));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  CHECK_FALSE(r.complete);
  CHECK(r.total_records > 0);
}

TEST_CASE("a process that records nothing leaves an existing report alone", "[faults][paths]") {
  TempDir dir;
  stepscope_test::spit(dir / "stepscope-report.json", "the user's report\n");
  // It starts stepscope and lives past the first snapshot's time, recording nothing.
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_QUIET=0"}, {"idle", "1500"}))) == 0);
  CHECK(slurp(dir / "stepscope-report.json") == "the user's report\n");
  CHECK(contains(slurp(dir / "probe.err"), "nothing was recorded"));
  CHECK_FALSE(contains(slurp(dir / "probe.err"), "of one core"));
}

TEST_CASE("/dev/stdout appended to a log (>> train.log 2>&1): the log is kept, the JSON whole, the summary after",
          "[faults][paths]") {
  TempDir dir;
  const std::string log = dir / "train.log";
  stepscope_test::spit(log, "yesterday's log\n");
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  const pid_t pid = start_probe(dir, {"STEPSCOPE_OUT=/dev/stdout", "STEPSCOPE_QUIET=0", "STEPSCOPE_SNAPSHOT_S=0.1"},
                                {"printing", "200"}, "probe", ProbeOutput{fd, true});
  ::close(fd);
  REQUIRE(WEXITSTATUS(wait_exit(pid)) == 0);
  const std::string text = slurp(log);
  INFO(text);
  // Before: reopened with O_TRUNC at offset 0, the log was gone and the
  // summary, written at the shell's offset, landed inside the JSON.
  REQUIRE(text.rfind("yesterday's log\nprogram output before\n", 0) == 0);
  const auto json_at = text.find("\n{");
  const auto summary_at = text.find("== stepscope");
  REQUIRE(json_at != std::string::npos);
  REQUIRE(summary_at != std::string::npos);
  CHECK(json_at < summary_at);
  const auto json_end = text.find("\n}\n", json_at);
  REQUIRE(json_end != std::string::npos);
  CHECK(json_end < summary_at);
  stepscope::Report r;
  std::string error;
  INFO(error);
  REQUIRE(stepscope::report_from_json(text.substr(json_at + 1, json_end + 2 - json_at), r, error));
  CHECK(r.complete);
  CHECK(r.steps.count == 195);
}

TEST_CASE("a link another user planted in a sticky directory is not followed; fallbacks are private",
          "[faults][paths][security]") {
  if (::geteuid() != 0) {
    WARN("skipped: planting a link owned by another user needs root");
    return;
  }
  TempDir dir;
  const std::string shared = dir / "shared";  // as /tmp: world-writable, sticky
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  const std::string victim = dir / "victim.txt";
  stepscope_test::spit(victim, "precious\n");
  const auto plant = [&](const std::string& at) {
    REQUIRE(::symlink(victim.c_str(), at.c_str()) == 0);
    REQUIRE(::lchown(at.c_str(), 65534, 65534) == 0);  // nobody's link
  };
  SECTION("at the report's own path") {
    plant(shared + "/stepscope-report.json");
    const int status =
        wait_exit(start_probe(dir, {"STEPSCOPE_OUT=" + shared + "/stepscope-report.json"}, {"workload", "10"}));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(slurp(victim) == "precious\n");
    const std::string err = slurp(dir / "probe.err");
    INFO(err);
    CHECK(contains(err, "not followed"));
    const auto at = err.find("writing it to '");
    REQUIRE(at != std::string::npos);
    const std::string fallback = err.substr(at + 15, err.find('\'', at + 15) - (at + 15));
    CHECK(load(fallback).steps.count == 5);
    struct stat st {};
    REQUIRE(::stat(fallback.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);  // in a shared directory: the owner's only
  }
  SECTION("a FIFO another user planted at the report's path gets nothing") {
    const std::string fifo = shared + "/stepscope-report.json";
    REQUIRE(::mkfifo(fifo.c_str(), 0666) == 0);
    REQUIRE(::chown(fifo.c_str(), 65534, 65534) == 0);
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // the planter, listening
    REQUIRE(reader >= 0);
    REQUIRE(WEXITSTATUS(wait_exit(start_probe(dir, {"STEPSCOPE_OUT=" + fifo}, {"workload", "10"}))) == 0);
    char byte = 0;
    CHECK(::read(reader, &byte, 1) <= 0);
    ::close(reader);
    CHECK(contains(slurp(dir / "probe.err"), "not written"));
  }
  SECTION("at the predictable fallback name in $TMPDIR") {
    const pid_t pid =
        start_probe(dir, {"TMPDIR=" + shared, "STEPSCOPE_OUT=" + dir.path + "/missing/dir/report.json"}, {"forever"});
    REQUIRE(wait_for_file(dir / "running"));
    plant(shared + "/stepscope-report." + std::to_string(pid) + ".json");
    ::kill(pid, SIGTERM);
    REQUIRE(WIFSIGNALED(wait_exit(pid)));
    CHECK(slurp(victim) == "precious\n");
    int reports = 0;
    for (const auto& name : list_dir(shared)) {
      struct stat st {};
      REQUIRE(::lstat((shared + "/" + name).c_str(), &st) == 0);
      if (S_ISLNK(st.st_mode)) continue;
      ++reports;
      CHECK((st.st_mode & 0777) == 0600);
      CHECK(load(shared + "/" + name).ended_by == "SIGTERM");
    }
    CHECK(reports == 1);
  }
}

TEST_CASE("a signal during the exit's report: neither the report nor the summary says the program caught it",
          "[faults][signals]") {
  TempDir dir;
  int died = 0;
  for (int trial = 0; trial < kSignalDuringWriteTrials / 2; ++trial) {
    ::unlink((dir / "running").c_str());
    ::unlink((dir / "stepscope-report.json").c_str());
    const pid_t pid = start_probe(dir, {"STEPSCOPE_SNAPSHOT_S=0", "STEPSCOPE_QUIET=0"}, {"big-exit-thread", "3000"});
    REQUIRE(wait_for_file(dir / "running"));
    std::this_thread::sleep_for(std::chrono::microseconds(500 * (trial % 20)));
    ::kill(pid, SIGTERM);
    const int status = wait_exit(pid);
    if (!WIFSIGNALED(status)) continue;  // the signal came after the process was gone
    ++died;
    const std::string err = slurp(dir / "probe.err");
    INFO("trial " << trial << "\n" << err);
    CHECK_FALSE(contains(err, "caught it"));
    if (!exists(dir / "stepscope-report.json")) continue;
    const stepscope::Report r = load(dir / "stepscope-report.json");
    CHECK_FALSE((r.interrupted.has_value() && (r.ended_by == "exit" || r.ended_by == "finish")));
  }
  CHECK(died > 0);
}

TEST_CASE("warnings show bad values and paths printably, cut to a bounded length", "[faults][env]") {
  // Issue 29: warnings echoed values raw: a newline forged a line of stepscope's
  // own, an escape sequence cleared the terminal, a 100 kB value came back whole.
  TempDir dir;
  const std::string forged = "3\nstepscope: report written to /forged\x1b[2J";
  REQUIRE(WEXITSTATUS(wait_exit(start_probe(
              dir, {"STEPSCOPE_WARMUP=" + forged, "STEPSCOPE_TRACE=" + std::string(100000, 'x'), "STEPSCOPE_QUIET=1"},
              {"workload", "10"}))) == 0);
  const std::string err = slurp(dir / "probe.err");
  INFO(err.substr(0, 2000));
  CHECK(err.find('\x1b') == std::string::npos);
  CHECK(err.find("\nstepscope: report written to /forged") == std::string::npos);
  CHECK(contains(err, "STEPSCOPE_WARMUP='3\\nstepscope: report written to /forged\\x1b[2J'"));
  CHECK(err.size() < 2000);
  const stepscope::Report r = load(dir / "stepscope-report.json");
  REQUIRE(r.warnings.size() >= 2);
  for (const auto& w : r.warnings) {
    CHECK(w.size() < 400);
    CHECK(w.find('\n') == std::string::npos);
  }
}
