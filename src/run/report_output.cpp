// The report file of a live run, and where it goes when its path cannot be
// written (a fallback file, then stderr): the run time's last hand-off
// (docs/architecture.md).
#include "run/runtime.hpp"

#include "core/env.hpp"

#include <stepscope/report.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::string write_report_with_fallback(Report& report, const std::string& path, int rank) {
  std::string error;
  if (write_report_file(report, path, error)) return path;
  const std::string fallback = fallback_report_path(rank, static_cast<long>(getpid()));
  const std::string message =
      "cannot write the report to '" + path + "' (" + error + "); writing it to '" + fallback + "' instead";
  std::fprintf(stderr, "stepscope: warning: %s\n", message.c_str());
  report.warnings.push_back(message);
  std::string error2;
  if (write_report_file(report, fallback, error2)) return fallback;
  std::fprintf(stderr, "stepscope: error: cannot write the report to '%s' either (%s); here it is:\n%s\n",
               fallback.c_str(), error2.c_str(), report_to_json(report).c_str());
  return "<stderr>";
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
