// Settings from the environment (env.hpp), and the paths the run writes to.
#include "core/env.hpp"

#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

bool parse_uint(const char* text, std::uint64_t min, std::uint64_t max, std::uint64_t& out) {
  if (text == nullptr || *text == '\0') return false;
  for (const char* p = text; *p != '\0'; ++p)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  out = value;
  return true;
}

bool parse_switch(const char* text, bool& out) noexcept {
  if (text == nullptr) return false;
  // Any case: "No", "TRUE", "Off" are what people type (strcasecmp allocates nothing).
  for (const char* s : {"1", "on", "true", "yes"})
    if (::strcasecmp(text, s) == 0) return out = true, true;
  for (const char* s : {"0", "off", "false", "no"})
    if (::strcasecmp(text, s) == 0) return out = false, true;
  return false;
}

namespace {

const char* system_getenv(const char* name) {
  return std::getenv(name);
}

// Seconds as plain decimal digits with an optional fraction ("1", "0.5"),
// from 0 to max: what parse_uint accepts for integers. strtod alone would
// also take " 1", "0x10", "1e3", "inf".
bool parse_seconds(const char* text, double max, double& out) {
  const char* p = text;
  std::size_t digits = 0;
  while (*p >= '0' && *p <= '9') ++p, ++digits;
  if (digits == 0) return false;
  if (*p == '.') {
    ++p;
    std::size_t fraction = 0;
    while (*p >= '0' && *p <= '9') ++p, ++fraction;
    if (fraction == 0) return false;
  }
  if (*p != '\0') return false;
  const double value = std::strtod(text, nullptr);
  if (!(value >= 0 && value <= max)) return false;
  out = value;
  return true;
}

}  // namespace

bool parse_cupti_window(const char* text, DeviceSwitches& out) noexcept {
  if (text == nullptr) return false;
  if (std::strcmp(text, "always") == 0) {
    out.cupti_window_steps = out.cupti_window_period = 1;
    return true;
  }
  const char* slash = std::strchr(text, '/');
  if (slash == nullptr) return false;
  char on_text[16] = {};
  const auto on_length = static_cast<std::size_t>(slash - text);
  if (on_length == 0 || on_length >= sizeof on_text) return false;
  std::memcpy(on_text, text, on_length);
  std::uint64_t on = 0, period = 0;
  if (!parse_uint(on_text, 1, 1000000, on) || !parse_uint(slash + 1, on, 1000000, period)) return false;
  out.cupti_window_steps = static_cast<std::uint32_t>(on);
  out.cupti_window_period = static_cast<std::uint32_t>(period);
  return true;
}

EarlySettings read_early_settings(GetEnv getenv_fn) noexcept {
  if (getenv_fn == nullptr) getenv_fn = system_getenv;
  EarlySettings e;
  if (const char* v = getenv_fn("STEPSCOPE"); v != nullptr && *v != '\0' && !parse_switch(v, e.enabled))
    e.enabled_invalid = true;
  if (const char* v = getenv_fn("STEPSCOPE_RING_RECORDS"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (parse_uint(v, 64, 1u << 22, n) && (n & (n - 1)) == 0)
      e.ring_capacity = static_cast<std::uint32_t>(n);
    else
      e.ring_capacity_invalid = true;
  }
  e.clock = getenv_fn("STEPSCOPE_CLOCK");
  // Bad values keep the default here; read_settings words the warning.
  if (const char* v = getenv_fn("STEPSCOPE_START_WAIT_S"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (parse_uint(v, 1, 600, n)) e.start_wait_s = static_cast<std::uint32_t>(n);
  }
  for (const auto& [name, value] : {std::pair<const char*, bool*>{"STEPSCOPE_CHILDREN", &e.children},
                                    {"STEPSCOPE_SIGNALS", &e.signals},
                                    {"STEPSCOPE_QUIET", &e.quiet},
                                    {"STEPSCOPE_CUDA", &e.device.cuda},
                                    {"STEPSCOPE_NVTX", &e.device.nvtx},
                                    {"STEPSCOPE_CUPTI", &e.device.cupti}})
    if (const char* v = getenv_fn(name); v != nullptr) (void)parse_switch(v, *value);
  (void)parse_cupti_window(getenv_fn("STEPSCOPE_CUPTI_WINDOW"), e.device);
  return e;
}

namespace {

// A value as a warning quotes it: at most kShownValueBytes bytes, and how
// long it was when cut (a 100 kB value is not echoed whole). The run time
// makes the whole warning printable (escapes) before it shows it.
constexpr std::size_t kShownValueBytes = 80;
std::string shown_value(const char* value) {
  const std::size_t n = std::strlen(value);
  if (n <= kShownValueBytes) return value;
  return std::string(value, kShownValueBytes) + "... (" + std::to_string(n) + " bytes)";
}

}  // namespace

namespace {
// The environment's performance knobs (Settings::knobs), by run.config key.
void read_knobs(GetEnv getenv_fn, std::map<std::string, std::string>& knobs) {
  static constexpr const char* kOwnKey[] = {
      "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",    "OMP_PROC_BIND",
      "LD_PRELOAD",      "MALLOC_CONF",     "PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING",
      "NCCL_ALGO",       "NCCL_PROTO",      "NCCL_P2P_DISABLE",        "NCCL_IB_DISABLE"};
  static constexpr const char* kGlibcMalloc[] = {"MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_",       "MALLOC_MMAP_THRESHOLD_",
                                                 "MALLOC_TOP_PAD_",  "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"};
  for (const char* name : kOwnKey)
    if (const char* v = getenv_fn(name); v != nullptr && *v != '\0') knobs[std::string("env:") + name] = shown_value(v);
  std::string malloc_settings;
  for (const char* name : kGlibcMalloc)
    if (const char* v = getenv_fn(name); v != nullptr && *v != '\0')
      malloc_settings += (malloc_settings.empty() ? "" : " ") + std::string(name) + "=" + shown_value(v);
  if (!malloc_settings.empty()) knobs["env:glibc_malloc"] = malloc_settings;
}
}  // namespace

Settings read_settings(std::vector<std::string>& warnings, GetEnv getenv_fn) {
  if (getenv_fn == nullptr) getenv_fn = system_getenv;
  Settings s;
  auto bad = [&](const char* name, const char* value, const std::string& expected, const std::string& fallback) {
    warnings.push_back(std::string(name) + "='" + shown_value(value) + "' is invalid (expected " + expected +
                       "); using " + fallback);
  };
  // A switch: unset or empty keeps the default; a bad value, one warning.
  auto read_switch = [&](const char* name, bool& value) {
    const char* v = getenv_fn(name);
    if (v == nullptr || *v == '\0' || parse_switch(v, value)) return;
    bad(name, v, "1/0, on/off, true/false or yes/no", value ? "1" : "0");
  };

  const EarlySettings early = read_early_settings(getenv_fn);
  s.enabled = early.enabled;
  if (early.enabled_invalid)
    bad("STEPSCOPE", getenv_fn("STEPSCOPE"), "1/0, on/off, true/false or yes/no", "1 (enabled)");
  s.ring_capacity = early.ring_capacity;
  if (early.ring_capacity_invalid)
    bad("STEPSCOPE_RING_RECORDS", getenv_fn("STEPSCOPE_RING_RECORDS"), "a power of two from 64 to 4194304",
        std::to_string(s.ring_capacity));
  if (early.clock != nullptr) s.clock = early.clock;
  if (const char* v = getenv_fn("STEPSCOPE_OUT"); v != nullptr && *v != '\0') s.out = v;
  if (const char* v = getenv_fn("STEPSCOPE_WARMUP"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (parse_uint(v, 0, 1000000, n)) {
      s.warmup_steps = n;
      s.warmup_from_env = true;
    } else {
      bad("STEPSCOPE_WARMUP", v, "a whole number of steps from 0 to 1000000", std::to_string(kDefaultWarmupSteps));
    }
  }
  if (const char* v = getenv_fn("STEPSCOPE_INTERVAL_MS"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (parse_uint(v, 1, 1000, n)) {
      s.interval_ms = static_cast<std::uint32_t>(n);
      s.interval_from_env = true;
    } else {
      bad("STEPSCOPE_INTERVAL_MS", v, "milliseconds from 1 to 1000",
          "adaptive, 1-" + std::to_string(s.interval_ms) + " ms");
    }
  }
  read_switch("STEPSCOPE_QUIET", s.quiet);

  if (const char* v = getenv_fn("STEPSCOPE_MERGED_OUT"); v != nullptr && *v != '\0') s.merged_out = v;
  if (const char* v = getenv_fn("STEPSCOPE_TRACE"); v != nullptr && *v != '\0') s.trace = v;
  if (const char* v = getenv_fn("STEPSCOPE_TRACE_OUT"); v != nullptr && *v != '\0') s.trace_out = v;
  if (const char* v = getenv_fn("STEPSCOPE_TRACE_MAX_EVENTS"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (parse_uint(v, 1000, 50'000'000, n))
      s.trace_max_events = static_cast<std::uint32_t>(n);
    else
      bad("STEPSCOPE_TRACE_MAX_EVENTS", v, "a number of events from 1000 to 50000000",
          std::to_string(s.trace_max_events));
  }
  if (const char* v = getenv_fn("STEPSCOPE_LIVE"); v != nullptr && *v != '\0') {
    // Seconds between progress lines ("1" = every second); "0" = off; the
    // switch words as every other switch takes them (on/yes: every second).
    double seconds = 0;
    bool on = false;
    if (parse_seconds(v, 3600, seconds))
      s.live_interval_s = seconds;
    else if (parse_switch(v, on))
      s.live_interval_s = on ? 1 : 0;
    else
      bad("STEPSCOPE_LIVE", v, "0, 1, on/off or an interval in seconds", "off");
  }
  if (const char* v = getenv_fn("STEPSCOPE_SNAPSHOT_S"); v != nullptr && *v != '\0') {
    double seconds = 0;
    if (parse_seconds(v, 86400, seconds) && (seconds == 0 || seconds >= 0.1))
      s.snapshot_interval_s = seconds;
    else
      bad("STEPSCOPE_SNAPSHOT_S", v, "0 (off) or seconds from 0.1 to 86400",
          std::to_string(static_cast<int>(kDefaultSnapshotSeconds)));
  }
  read_switch("STEPSCOPE_SIGNALS", s.signals);
  if (const char* v = getenv_fn("STEPSCOPE_START_WAIT_S"); v != nullptr && *v != '\0') {
    std::uint64_t n = 0;
    if (!parse_uint(v, 1, 600, n))
      bad("STEPSCOPE_START_WAIT_S", v, "whole seconds from 1 to 600", std::to_string(kDefaultStartWaitSeconds));
  }

  read_switch("STEPSCOPE_CHILDREN", s.children);

  read_switch("STEPSCOPE_LIVE_FORCE", s.live_forced);
  read_switch("STEPSCOPE_CUDA", s.device.cuda);
  read_switch("STEPSCOPE_NVTX", s.device.nvtx);
  read_switch("STEPSCOPE_CUPTI", s.device.cupti);
  if (const char* v = getenv_fn("STEPSCOPE_CUPTI_WINDOW");
      v != nullptr && *v != '\0' && !parse_cupti_window(v, s.device))
    bad("STEPSCOPE_CUPTI_WINDOW", v, "'always' or K/N steps, 1 <= K <= N <= 1000000",
        std::to_string(s.device.cupti_window_steps) + "/" + std::to_string(s.device.cupti_window_period));

  // Rank and world size from the usual launchers, first one set wins.
  const char* rank_vars[][2] = {{"RANK", "WORLD_SIZE"},
                                {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                {"PMI_RANK", "PMI_SIZE"},
                                {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& pair : rank_vars) {
    const char* r = getenv_fn(pair[0]);
    if (r == nullptr || *r == '\0') continue;
    std::uint64_t rank = 0, world = 1;
    if (!parse_uint(r, 0, 1u << 24, rank)) {
      bad(pair[0], r, "a rank number", "no rank");
      continue;
    }
    s.rank = static_cast<int>(rank);
    const char* w = getenv_fn(pair[1]);
    if (w != nullptr && *w != '\0') {
      if (parse_uint(w, 1, 1u << 24, world) && world > rank)
        s.world_size = static_cast<int>(world);
      else
        bad(pair[1], w, "a world size larger than the rank", "rank+1");
    }
    if (s.world_size <= s.rank) s.world_size = s.rank + 1;
    break;
  }
  // The job's processes on this host (torchrun, Open MPI, MPICH): the
  // others hold this host's CPUs too, and are not another job.
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = getenv_fn(name);
    if (v == nullptr || *v == '\0') continue;
    std::uint64_t n = 0;
    if (parse_uint(v, 1, 1u << 16, n))
      s.local_ranks = static_cast<int>(n);
    else
      bad(name, v, "a number of processes from 1 to 65536", "unknown");
    break;
  }
  read_knobs(getenv_fn, s.knobs);
  return s;
}

int local_ranks_from_rendezvous(int world_size, const std::string& host, GetEnv getenv_fn) noexcept {
  if (getenv_fn == nullptr) getenv_fn = system_getenv;
  const char* a = getenv_fn("MASTER_ADDR");
  if (world_size < 2 || a == nullptr) return 0;
  const std::string_view addr(a);
  const bool here =
      addr == "localhost" || addr == "::1" || addr.substr(0, 4) == "127." || (!host.empty() && addr == host);
  return here ? world_size : 0;
}

std::string resolve_report_path(const std::string& out, int rank) {
  if (out.empty())
    return rank >= 0 ? "stepscope-report.rank" + std::to_string(rank) + ".json" : "stepscope-report.json";
  std::string path = out;
  const std::string placeholder = "{rank}";
  const std::string value = std::to_string(rank >= 0 ? rank : 0);
  for (std::size_t at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at + value.size()))
    path.replace(at, placeholder.size(), value);
  return path;
}

namespace {

void expand(std::string& path, const std::string& placeholder, const std::string& value) {
  for (std::size_t at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at + value.size()))
    path.replace(at, placeholder.size(), value);
}

// "dir/report.json" + ".rank2" -> "dir/report.rank2.json" (before the last
// extension of the file name, or at the end when it has none).
void insert_before_extension(std::string& path, const std::string& tag) {
  const std::size_t slash = path.rfind('/');
  const std::size_t name = slash == std::string::npos ? 0 : slash + 1;
  const std::string double_extension = ".json.gz";
  std::size_t at = path.rfind('.');
  if (path.size() >= name + double_extension.size() + 1 &&
      path.compare(path.size() - double_extension.size(), double_extension.size(), double_extension) == 0)
    at = path.size() - double_extension.size();
  if (at == std::string::npos || at <= name) at = path.size();  // no extension (a leading dot is a hidden file)
  path.insert(at, tag);
}

}  // namespace

std::string process_output_path(const std::string& out, const std::string& default_name, int rank, int world_size,
                                long child_pid, std::string& note) {
  note.clear();
  std::string path = out.empty() ? default_name : out;
  const bool has_rank = path.find("{rank}") != std::string::npos;
  const bool has_pid = path.find("{pid}") != std::string::npos;
  expand(path, "{rank}", std::to_string(rank >= 0 ? rank : 0));
  expand(path, "{pid}", std::to_string(child_pid > 0 ? child_pid : static_cast<long>(getpid())));
  // A stream the user named (/dev/stdout, /dev/fd/3, a FIFO) is each
  // process' own: it takes no tag (/dev/stdout.rank1 is nobody's terminal).
  struct stat st {};
  if (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/self/fd/", 0) == 0 ||
      (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)))
    return path;
  std::string tags;
  if (rank >= 0 && !has_rank && (out.empty() || world_size > 1)) tags += ".rank" + std::to_string(rank);
  if (child_pid > 0 && !has_pid) tags += ".pid" + std::to_string(child_pid);
  if (!tags.empty()) {
    insert_before_extension(path, tags);
    if (!out.empty())
      note = "'" + out + "' has no " + std::string(child_pid > 0 && !has_pid ? "{pid}" : "{rank}") +
             " placeholder: this process writes '" + path + "' so that processes do not overwrite each other";
  }
  return path;
}

std::string with_file_tag(const std::string& path, const std::string& tag) {
  std::string tagged = path;
  insert_before_extension(tagged, tag);
  return tagged;
}

std::string fallback_report_path(int rank, long pid) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  if (access(dir.c_str(), W_OK) != 0) dir = "/tmp";
  std::string name = "stepscope-report";
  if (rank >= 0) name += ".rank" + std::to_string(rank);
  name += "." + std::to_string(pid) + ".json";
  return dir + "/" + name;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
