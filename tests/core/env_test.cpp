// Environment settings: defaults, bad values (one warning, safe default),
// rank detection, report paths.
#include "core/env.hpp"
#include "core/atomic_file.hpp"

#include "common/files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>

using namespace stepscope::detail;

namespace {
std::map<std::string, std::string>* g_env = nullptr;
const char* fake_getenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}
Settings read(std::map<std::string, std::string> env, std::vector<std::string>& warnings) {
  g_env = &env;
  return read_settings(warnings, fake_getenv);
}
}  // namespace

TEST_CASE("defaults", "[env]") {
  std::vector<std::string> w;
  const Settings s = read({}, w);
  REQUIRE(w.empty());
  REQUIRE(s.enabled);
  REQUIRE(s.warmup_steps == kDefaultWarmupSteps);
  REQUIRE(s.rank == -1);
  REQUIRE(resolve_report_path(s.out, s.rank) == "stepscope-report.json");
}

TEST_CASE("STEPSCOPE switches", "[env]") {
  std::vector<std::string> w;
  REQUIRE_FALSE(read({{"STEPSCOPE", "0"}}, w).enabled);
  REQUIRE_FALSE(read({{"STEPSCOPE", "off"}}, w).enabled);
  REQUIRE(read({{"STEPSCOPE", "1"}}, w).enabled);
  REQUIRE(w.empty());
  REQUIRE(read({{"STEPSCOPE", "maybe"}}, w).enabled);  // bad value: default, one warning
  REQUIRE(w.size() == 1);
  REQUIRE(w[0].find("STEPSCOPE='maybe'") != std::string::npos);
}

TEST_CASE("bad numeric values get one warning each and a safe default", "[env]") {
  std::vector<std::string> w;
  const Settings s = read({{"STEPSCOPE_WARMUP", "-3"},
                           {"STEPSCOPE_RING_RECORDS", "1000"},
                           {"STEPSCOPE_INTERVAL_MS", "0"},
                           {"STEPSCOPE_QUIET", "loud"}},
                          w);
  REQUIRE(w.size() == 4);
  REQUIRE(s.warmup_steps == kDefaultWarmupSteps);
  REQUIRE(s.ring_capacity == 16384);
  REQUIRE(s.interval_ms == 200);
  REQUIRE_FALSE(s.interval_from_env);
  REQUIRE_FALSE(s.quiet);
  std::vector<std::string> w2;
  const Settings t = read({{"STEPSCOPE_WARMUP", "0"}, {"STEPSCOPE_RING_RECORDS", "1024"}}, w2);
  REQUIRE(w2.empty());
  REQUIRE(t.warmup_steps == 0);
  REQUIRE(t.warmup_from_env);
  REQUIRE(t.ring_capacity == 1024);
  std::vector<std::string> w3;
  REQUIRE(read({{"STEPSCOPE_WARMUP", "12abc"}}, w3).warmup_steps == kDefaultWarmupSteps);
  REQUIRE(read({{"STEPSCOPE_WARMUP", "99999999999999999999999"}}, w3).warmup_steps == kDefaultWarmupSteps);
  REQUIRE(w3.size() == 2);
}

TEST_CASE("rank from launcher variables and report paths", "[env]") {
  std::vector<std::string> w;
  Settings s = read({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}}, w);
  REQUIRE(s.rank == 3);
  REQUIRE(s.world_size == 8);
  REQUIRE(resolve_report_path("", s.rank) == "stepscope-report.rank3.json");
  REQUIRE(resolve_report_path("out/{rank}/r{rank}.json", 3) == "out/3/r3.json");
  REQUIRE(resolve_report_path("plain.json", 3) == "plain.json");
  s = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "7"}}, w);
  REQUIRE(s.rank == 1);  // RANK wins
  s = read({{"SLURM_PROCID", "x"}}, w);
  REQUIRE(s.rank == -1);
  REQUIRE(w.back().find("SLURM_PROCID") != std::string::npos);
  REQUIRE(fallback_report_path(2, 1234).find("stepscope-report.rank2.1234.json") != std::string::npos);
}

TEST_CASE("STEPSCOPE_LIVE and STEPSCOPE_SNAPSHOT_S take plain decimal seconds only", "[env]") {
  std::vector<std::string> w;
  REQUIRE(read({{"STEPSCOPE_LIVE", "1"}}, w).live_interval_s == 1);
  REQUIRE(read({{"STEPSCOPE_LIVE", "0.5"}}, w).live_interval_s == 0.5);
  // The words every other switch takes (a user typed STEPSCOPE_LIVE=yes and got "using off").
  REQUIRE(read({{"STEPSCOPE_LIVE", "yes"}}, w).live_interval_s == 1);
  REQUIRE(read({{"STEPSCOPE_LIVE", "On"}}, w).live_interval_s == 1);
  REQUIRE(read({{"STEPSCOPE_LIVE", "false"}}, w).live_interval_s == 0);
  REQUIRE(read({{"STEPSCOPE_SNAPSHOT_S", "0"}}, w).snapshot_interval_s == 0);
  REQUIRE(read({{"STEPSCOPE_SNAPSHOT_S", "2.5"}}, w).snapshot_interval_s == 2.5);
  REQUIRE(w.empty());
  // What strtod alone accepts and the other variables reject.
  for (const char* bad : {" 1", "0x10", "1e3", "inf", "nan", "1.", ".5", "-1", "+1", "1 ", "4000"}) {
    INFO(bad);
    std::vector<std::string> w1;
    REQUIRE(read({{"STEPSCOPE_LIVE", bad}}, w1).live_interval_s == 0);
    REQUIRE(w1.size() == 1);
    REQUIRE(w1[0].find("STEPSCOPE_LIVE='") != std::string::npos);
  }
  std::vector<std::string> w2;
  REQUIRE(read({{"STEPSCOPE_SNAPSHOT_S", "1e3"}}, w2).snapshot_interval_s == kDefaultSnapshotSeconds);
  REQUIRE(read({{"STEPSCOPE_SNAPSHOT_S", "0.01"}}, w2).snapshot_interval_s == kDefaultSnapshotSeconds);
  REQUIRE(w2.size() == 2);
}

TEST_CASE("signal and child switches", "[env]") {
  std::vector<std::string> w;
  const Settings d = read({}, w);
  REQUIRE(d.signals);
  REQUIRE_FALSE(d.children);
  REQUIRE_FALSE(read({{"STEPSCOPE_SIGNALS", "0"}}, w).signals);
  REQUIRE(read({{"STEPSCOPE_CHILDREN", "1"}}, w).children);
  REQUIRE(w.empty());
  REQUIRE(read({{"STEPSCOPE_SIGNALS", "sometimes"}}, w).signals);
  REQUIRE(w.size() == 1);
}

TEST_CASE("process output paths: ranks and forked children never share a file", "[env]") {
  std::string note;
  // Default names.
  REQUIRE(process_output_path("", "stepscope-report.json", -1, 1, 0, note) == "stepscope-report.json");
  REQUIRE(note.empty());
  REQUIRE(process_output_path("", "stepscope-report.json", 3, 8, 0, note) == "stepscope-report.rank3.json");
  REQUIRE(process_output_path("", "stepscope-report.json", -1, 1, 42, note) == "stepscope-report.pid42.json");
  REQUIRE(process_output_path("", "stepscope-trace.json.gz", 2, 4, 0, note) == "stepscope-trace.rank2.json.gz");
  REQUIRE(note.empty());
  // Placeholders.
  REQUIRE(process_output_path("out/{rank}/r{rank}.json", "", 3, 8, 0, note) == "out/3/r3.json");
  REQUIRE(process_output_path("r-{pid}.json", "", -1, 1, 42, note) == "r-42.json");
  REQUIRE(note.empty());
  // A single process keeps its path as given.
  REQUIRE(process_output_path("plain.json", "", -1, 1, 0, note) == "plain.json");
  REQUIRE(process_output_path("plain.json", "", 0, 1, 0, note) == "plain.json");
  REQUIRE(note.empty());
  // Several ranks, no {rank}: a per-rank name and a note saying so.
  REQUIRE(process_output_path("dir.v1/report.json", "", 2, 4, 0, note) == "dir.v1/report.rank2.json");
  REQUIRE(note.find("no {rank} placeholder") != std::string::npos);
  REQUIRE(process_output_path("report", "", 2, 4, 0, note) == "report.rank2");
  REQUIRE(process_output_path(".hidden", "", 2, 4, 0, note) == ".hidden.rank2");
  REQUIRE(process_output_path("t.json.gz", "", 1, 2, 0, note) == "t.rank1.json.gz");
  // A child, no {pid}.
  REQUIRE(process_output_path("report.json", "", -1, 1, 42, note) == "report.pid42.json");
  REQUIRE(note.find("{pid}") != std::string::npos);
  // A stream is each process' own: no tag (/dev/stdout.rank1 is nobody's terminal).
  for (const char* stream : {"/dev/stdout", "/dev/stderr", "/dev/fd/3", "/proc/self/fd/1"}) {
    REQUIRE(process_output_path(stream, "", 1, 4, 0, note) == stream);
    REQUIRE(process_output_path(stream, "", -1, 1, 42, note) == stream);
    REQUIRE(note.empty());
  }
  stepscope_test::TempDir dir;
  const std::string fifo = dir.path + "/reports";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(process_output_path(fifo, "", 1, 4, 0, note) == fifo);
}

TEST_CASE("one switch parser for every variable: any case, yes/no, on/off, true/false, 1/0", "[env]") {
  // Issue 29: STEPSCOPE_CUDA=FALSE/Off/No left device timing on (the CUDA
  // backend had a parser of its own) and the core rejected No/Yes.
  for (const char* off : {"0", "off", "OFF", "Off", "false", "FALSE", "False", "no", "NO", "No", "nO"}) {
    INFO(off);
    std::vector<std::string> w;
    const Settings s =
        read({{"STEPSCOPE_CUDA", off}, {"STEPSCOPE_CUPTI", off}, {"STEPSCOPE_SIGNALS", off}, {"STEPSCOPE", off}}, w);
    CHECK(w.empty());
    CHECK_FALSE(s.device.cuda);
    CHECK_FALSE(s.device.cupti);
    CHECK_FALSE(s.signals);
    CHECK_FALSE(s.enabled);
    CHECK_FALSE(read_early_settings([](const char* name) -> const char* {
                  return std::string(name) == "STEPSCOPE_CUDA" ? "No" : nullptr;
                }).device.cuda);
  }
  for (const char* on : {"1", "on", "On", "true", "True", "yes", "Yes", "YES"}) {
    INFO(on);
    std::vector<std::string> w;
    const Settings s = read({{"STEPSCOPE_NVTX", on}, {"STEPSCOPE_QUIET", on}, {"STEPSCOPE_CHILDREN", on}}, w);
    CHECK(w.empty());
    CHECK(s.device.nvtx);
    CHECK(s.quiet);
    CHECK(s.children);
  }
  // Before the first scope (the "nothing was recorded" line) too, with the same parser.
  CHECK(read_early_settings([](const char* name) -> const char* {
          return std::string(name) == "STEPSCOPE_QUIET" ? "Yes" : nullptr;
        }).quiet);
  CHECK_FALSE(read_early_settings([](const char*) -> const char* { return nullptr; }).quiet);
  std::vector<std::string> none;
  const Settings d = read({}, none);
  CHECK(d.device.cuda);
  CHECK_FALSE(d.device.nvtx);
  CHECK(d.device.cupti);
  std::vector<std::string> w;
  CHECK(read({{"STEPSCOPE_CUDA", "maybe"}}, w).device.cuda);  // bad: the default, one warning
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("STEPSCOPE_CUDA='maybe'") != std::string::npos);
}

TEST_CASE("a warning quotes at most a bounded part of a bad value", "[env]") {
  std::vector<std::string> w;
  const std::string huge(100000, 'x');
  (void)read({{"STEPSCOPE_WARMUP", huge}}, w);
  REQUIRE(w.size() == 1);
  CHECK(w[0].size() < 300);
  CHECK(w[0].find("(100000 bytes)") != std::string::npos);
}

TEST_CASE("a replaced report keeps its own mode, never a hard link's, and its temporary names are not predictable",
          "[env][files]") {
  stepscope_test::TempDir dir;
  const std::string own = dir.path + "/own.json", linked = dir.path + "/linked.json", other = dir.path + "/victim";
  std::string error;
  const auto mode_of = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
  };
  // The user's own file, one name: its mode stays (0640 here).
  stepscope_test::spit(own, "old");
  REQUIRE(::chmod(own.c_str(), 0640) == 0);
  REQUIRE(write_file_atomically(own, std::string("new"), error));
  CHECK(stepscope_test::slurp(own) == "new");
  CHECK(mode_of(own) == 0640);
  // A name that is a second link to another file (0666: anyone may write it):
  // the report is a new file of the default mode, the other file untouched.
  stepscope_test::spit(other, "theirs");
  REQUIRE(::chmod(other.c_str(), 0666) == 0);
  REQUIRE(::link(other.c_str(), linked.c_str()) == 0);
  const mode_t mask = ::umask(022);
  REQUIRE(write_file_atomically(linked, std::string("report"), error));
  ::umask(mask);
  CHECK(stepscope_test::slurp(linked) == "report");
  CHECK(stepscope_test::slurp(other) == "theirs");
  CHECK(mode_of(linked) == 0644);
  // Names planted in advance for this pid do not stop the write.
  for (int i = 0; i < 8; ++i) {
    const std::string planted =
        own + ".stepscope-tmp." + std::to_string(::getpid()) + (i ? "." + std::to_string(i) : "");
    stepscope_test::spit(planted, "");
  }
  REQUIRE(write_file_atomically(own, std::string("again"), error));
  CHECK(stepscope_test::slurp(own) == "again");
}

TEST_CASE("STEPSCOPE_START_WAIT_S bounds the wait for a collector still starting", "[env]") {
  const auto early = [](const char* value) {
    std::map<std::string, std::string> env;
    if (value != nullptr) env["STEPSCOPE_START_WAIT_S"] = value;
    g_env = &env;
    return read_early_settings(fake_getenv).start_wait_s;
  };
  CHECK(early(nullptr) == kDefaultStartWaitSeconds);
  CHECK(early("2") == 2);
  CHECK(early("600") == 600);
  for (const char* bad : {"0", "601", "1.5", "-3", "x", " 2"}) {
    INFO(bad);
    CHECK(early(bad) == kDefaultStartWaitSeconds);  // the default; read_settings says why
    std::vector<std::string> w;
    (void)read({{"STEPSCOPE_START_WAIT_S", bad}}, w);
    REQUIRE(w.size() == 1);
    CHECK(w[0].find("STEPSCOPE_START_WAIT_S='") != std::string::npos);
  }
  std::vector<std::string> none;
  (void)read({{"STEPSCOPE_START_WAIT_S", "5"}}, none);
  CHECK(none.empty());
}

TEST_CASE("the job's processes on this host come from the launcher", "[env]") {
  std::vector<std::string> w;
  CHECK(read({}, w).local_ranks == 0);
  CHECK(read({{"LOCAL_WORLD_SIZE", "4"}}, w).local_ranks == 4);
  CHECK(read({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}, w).local_ranks == 2);
  CHECK(read({{"MPI_LOCALNRANKS", "8"}}, w).local_ranks == 8);
  CHECK(read({{"LOCAL_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}, w).local_ranks == 3);  // first set wins
  REQUIRE(w.empty());
  CHECK(read({{"LOCAL_WORLD_SIZE", "0"}}, w).local_ranks == 0);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("LOCAL_WORLD_SIZE='0'") != std::string::npos);
}

TEST_CASE("a job whose launcher names no local size is on this host when its rendezvous address is", "[env]") {
  // torch.multiprocessing.spawn: the program sets MASTER_ADDR=localhost and
  // passes the rank to init_process_group; no LOCAL_WORLD_SIZE.
  const auto local = [](std::map<std::string, std::string> env, int world_size) {
    g_env = &env;
    return local_ranks_from_rendezvous(world_size, "node7", fake_getenv);
  };
  CHECK(local({{"MASTER_ADDR", "localhost"}}, 4) == 4);
  CHECK(local({{"MASTER_ADDR", "127.0.0.1"}}, 2) == 2);
  CHECK(local({{"MASTER_ADDR", "::1"}}, 2) == 2);
  CHECK(local({{"MASTER_ADDR", "node7"}}, 3) == 3);  // this host by name
  CHECK(local({{"MASTER_ADDR", "node8"}}, 3) == 0);  // another host: unknown
  CHECK(local({{"MASTER_ADDR", "10.0.0.7"}}, 3) == 0);
  CHECK(local({}, 4) == 0);
  CHECK(local({{"MASTER_ADDR", "localhost"}}, 1) == 0);  // a job of one rank has no others
}

TEST_CASE("the environment's performance knobs are recorded, glibc's malloc settings as one", "[env]") {
  // pytorch/examples' super_resolution with the allocator advice taken: a
  // step 10% faster, and `stepscope diff` read "config: no changes".
  std::vector<std::string> warnings;
  Settings s = read({{"MALLOC_MMAP_THRESHOLD_", "33554432"},
                     {"MALLOC_TRIM_THRESHOLD_", "67108864"},
                     {"MALLOC_TOP_PAD_", "33554432"},
                     {"OMP_NUM_THREADS", "1"},
                     {"LD_PRELOAD", "libjemalloc.so.2"},
                     {"MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1"},
                     {"CUDA_LAUNCH_BLOCKING", ""},
                     {"HOME", "/root"}},
                    warnings);
  CHECK(warnings.empty());
  CHECK(s.knobs == std::map<std::string, std::string>{
                       {"env:glibc_malloc",
                        "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TOP_PAD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864"},
                       {"env:OMP_NUM_THREADS", "1"},
                       {"env:LD_PRELOAD", "libjemalloc.so.2"},
                       {"env:MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1"}});
  CHECK(read({}, warnings).knobs.empty());
}
