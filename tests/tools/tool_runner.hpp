// Helpers for the tool tests: temporary directories, running a command with
// its output captured, reading (gzipped) files.
#pragma once

#include <stepscope/report.hpp>

#include "common/files.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace stepscope_test {

// Reads a file, gunzipping it when it is gzip.
inline std::string slurp_maybe_gzip(const std::string& p) {
  std::string out;
  gzFile f = gzopen(p.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

struct Result {
  int status = -1;  // exit code, -1 when killed by a signal
  std::string out, err;
};

// Runs a shell command line in `dir`, stdout and stderr captured separately.
inline Result run(const TempDir& dir, const std::string& command) {
  static int counter = 0;
  const std::string id = std::to_string(++counter);
  const std::string out = dir / ("out." + id), err = dir / ("err." + id);
  const std::string cmd = "cd '" + dir.path + "' && " + command + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::string tool() {
  return std::string("'") + STEPSCOPE_TOOL + "'";
}
inline std::string probe() {
  return std::string("'") + STEPSCOPE_PROBE + "'";
}

// A live report of tests/core/probe (quiet, in `dir`), written to `name`.
inline bool make_probe_report(const TempDir& dir, const std::string& name, const std::string& env = "",
                              int steps = 120) {
  const Result r = run(dir, "env STEPSCOPE_QUIET=1 STEPSCOPE_OUT='" + (dir / name) + "' " + env + " " + probe() +
                                " workload " + std::to_string(steps));
  return r.status == 0 && exists(dir / name);
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A trace from tests/data/traces (inside the repository).
inline std::string shared_trace(const std::string& name) {
  return std::string(STEPSCOPE_TEST_DATA_DIR) + "/traces/" + name;
}

}  // namespace stepscope_test
