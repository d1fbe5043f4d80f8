// Environment settings: defaults, bad values (one warning, safe default),
// rank detection, report paths.
#include "core/env.hpp"

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
  REQUIRE(s.interval_ms == 20);
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
