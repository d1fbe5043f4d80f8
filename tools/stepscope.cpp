// The `stepscope` command-line tool: look at, compare, merge and produce
// reports. Verbs, options and exit codes: docs/cli.md.
//
//   stepscope show stepscope-report.json
//   stepscope diff base.json new.json
//   stepscope analyze rank0.json.gz -o rank0.stepscope.json
//   stepscope html stepscope-report.json -o report.html
#include "trace_check.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/html.hpp>
#include <stepscope/import.hpp>
#include <stepscope/report.hpp>
#include <stepscope/version.hpp>

#if __has_include(<stepscope/merge.hpp>)
#include <stepscope/merge.hpp>
#define STEPSCOPE_CLI_HAS_MERGE 1
#else
#define STEPSCOPE_CLI_HAS_MERGE 0
#endif

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

namespace {

// Exit codes (docs/cli.md). Scripts rely on them: do not renumber.
enum Exit : int {
  kOk = 0,
  kFailure = 1,     // the tool ran but the job failed: analysis/merge failed, output not writable, validation failed
  kUsage = 2,       // bad command line
  kInputError = 3,  // an input could not be used: missing, unreadable, not JSON, wrong schema version, truncated gzip
};

// ---- command line -----------------------------------------------------------

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // options that take a value
  std::map<std::string, bool> flags;          // options without one
  bool help = false;
};

struct OptionSpec {
  std::vector<std::string> value_options;      // e.g. "-o", "--out"
  std::vector<std::string> flag_options;       // e.g. "--json"
  std::map<std::string, std::string> aliases;  // "-o" -> "--out"
};

class UsageError : public std::exception {
 public:
  explicit UsageError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

bool contains(const std::vector<std::string>& list, const std::string& s) {
  for (const auto& x : list)
    if (x == s) return true;
  return false;
}

// "--out FILE", "--out=FILE", "-o FILE"; "--" ends the options.
Args parse(const std::vector<std::string>& argv, const OptionSpec& spec) {
  Args args;
  bool options_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      args.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      args.help = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const auto alias = spec.aliases.find(a);
    const std::string name = alias != spec.aliases.end() ? alias->second : a;
    if (contains(spec.value_options, name)) {
      if (!has_value) {
        if (i + 1 >= argv.size()) throw UsageError("option " + a + " needs a value");
        value = argv[++i];
      }
      args.values[name] = value;
    } else if (contains(spec.flag_options, name)) {
      if (has_value) throw UsageError("option " + a + " takes no value");
      args.flags[name] = true;
    } else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
  return args;
}

std::string get(const Args& args, const std::string& name, const std::string& fallback = "") {
  const auto it = args.values.find(name);
  return it != args.values.end() ? it->second : fallback;
}

bool flag(const Args& args, const std::string& name) {
  return args.flags.count(name) != 0;
}

void error(const std::string& message) {
  std::fprintf(stderr, "stepscope: error: %s\n", message.c_str());
}

void out(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "runs/rank0.json.gz" -> "runs/rank0" (for default output names).
std::string stem(std::string path) {
  for (const char* suffix : {".gz", ".json", ".pt.trace"})
    if (ends_with(path, suffix)) path.resize(path.size() - std::string(suffix).size());
  return path;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- help texts ---------------------------------------------------------------

constexpr const char* kMainHelp = R"(usage: stepscope <verb> [options] [arguments]

Look at, compare and produce stepscope reports (the JSON a run writes at exit).

verbs:
  show REPORT            the summary table and the verdict of a report
  diff BASE NEW          per-phase deltas with their noise, what changed in the config
  merge REPORT...        one job report from the reports of its ranks
  analyze TRACE...       a report from PyTorch-profiler / Kineto traces (.json or .json.gz)
  html REPORT            a self-contained HTML page of a report
  trace validate TRACE   check a Chrome-trace file (STEPSCOPE_TRACE output) structurally

'stepscope <verb> --help' describes a verb's options.

exit codes: 0 ok; 1 the analysis, merge, validation or an output write failed;
            2 usage error; 3 input error (missing file, not JSON, wrong schema
            version, truncated gzip, unreadable trace)
)";

constexpr const char* kShowHelp = R"(usage: stepscope show REPORT [--json] [--reanalyze]

Prints the report's summary: step statistics, the step breakdown, the phases,
the verdict with its evidence, recommendations, what-if projections, findings
and dropped records. A merged report also gets its per-rank table.

options:
  --json        print the report as JSON instead (normalised, schema version
                checked); with --reanalyze, the re-analysed report
  --reanalyze   run this stepscope's analyzer again on the report's facts
                (verdict, findings and what-if from the current rules)
)";

constexpr const char* kDiffHelp = R"(usage: stepscope diff BASE NEW

Compares two reports: the step and each phase (mean ms, delta, noise and
whether the delta is significant), the verdicts, and which set_config() values
changed. Warns when more than one value changed: change one variable at a time.
Exit code 0 whenever both reports could be read.
)";

constexpr const char* kMergeHelp = R"(usage: stepscope merge REPORT... [-o OUT] [--html FILE]

Merges the reports of one job's ranks (stepscope-report.rankN.json) into one
job report: merged phase distributions, per-rank table, imbalance, stragglers
and the waiting they cause, and the verdict on the merged facts.

options:
  -o, --out FILE   where to write the merged report (default stepscope-merged.json)
  --html FILE      also write the HTML page of the merged report
  -q, --quiet      do not print the summary
)";

constexpr const char* kAnalyzeHelp =
    R"(usage: stepscope analyze TRACE... [-o OUT] [--out-dir DIR] [--merge] [--html FILE]

Builds a stepscope report from PyTorch-profiler / Kineto Chrome traces (.json
or .json.gz): steps from ProfilerStep#N, phases from user annotations, device
facts from the GPU timeline, then the verdict. Prints the breakdown and the
verdict of each trace and writes the same JSON report a live run writes.

options:
  -o, --out FILE   the report file (one trace; with --merge: the merged report).
                   Default: <trace without .json/.gz>.stepscope.json
  --out-dir DIR    write the per-trace reports into DIR (default: beside each trace)
  --merge          several traces of one job's ranks: also merge their reports
                   (default output stepscope-merged.json)
  --html FILE      also write the HTML page (one trace, or the merged report)
  -q, --quiet      do not print the summaries
)";

constexpr const char* kHtmlHelp = R"(usage: stepscope html REPORT [-o FILE]

Writes one self-contained HTML page (no network access: inline CSS, SVG and
script) with the verdict and its evidence, the step breakdown over the run,
per-phase distributions, what-if projections, findings, warnings, the run's
configuration and, for merged reports, the per-rank view.

options:
  -o, --out FILE   the page to write (default: <REPORT without .json>.html)
)";

constexpr const char* kTraceHelp = R"(usage: stepscope trace validate TRACE [--any-producer]

Checks a Chrome-trace JSON file (.json or .json.gz), such as the one
STEPSCOPE_TRACE writes: a traceEvents array; every event with ph, name, pid,
tid and a numeric ts; complete ('X') events with dur >= 0, sorted by ts and
properly nested per thread; process_name and thread_name metadata for every
process and thread used; steps marked (complete events with cat "step").
Exit 0 when valid, 1 with the problems listed when not, 3 when unreadable.

options:
  --any-producer   do not require step markers (traces from other tools)
)";

// ---- verbs --------------------------------------------------------------------

// Loads a report or explains why not (exit code kInputError).
bool load(const std::string& path, stepscope::Report& report) {
  std::string why;
  if (stepscope::load_report(path, report, why)) return true;
  error(why);
  return false;
}

bool write_report(const stepscope::Report& report, const std::string& path) {
  std::string why;
  if (stepscope::write_report_file(report, path, why)) return true;
  error("cannot write the report to '" + path + "': " + why);
  return false;
}

bool write_html(const stepscope::Report& report, const std::string& path) {
  std::string why;
  if (stepscope::write_html_report(report, path, why)) return true;
  error(why);
  return false;
}

std::string summary_of(const stepscope::Report& report) {
  std::string text = stepscope::format_summary(report);
#if STEPSCOPE_CLI_HAS_MERGE
  if (report.ranks) text += stepscope::format_multi_rank(report);
#endif
  return text;
}

int cmd_show(const std::vector<std::string>& argv) {
  const Args args = parse(argv, {{}, {"--json", "--reanalyze"}, {}});
  if (args.help) {
    out(kShowHelp);
    return kOk;
  }
  if (args.positional.size() != 1) throw UsageError("show takes exactly one REPORT");
  stepscope::Report report;
  if (!load(args.positional[0], report)) return kInputError;
  if (flag(args, "--reanalyze")) stepscope::analyze(report);
  out(flag(args, "--json") ? stepscope::report_to_json(report) + "\n" : summary_of(report));
  return kOk;
}

int cmd_diff(const std::vector<std::string>& argv) {
  const Args args = parse(argv, {});
  if (args.help) {
    out(kDiffHelp);
    return kOk;
  }
  if (args.positional.size() != 2) throw UsageError("diff takes two reports: BASE NEW");
  stepscope::Report base, candidate;
  if (!load(args.positional[0], base) || !load(args.positional[1], candidate)) return kInputError;
  out(fmt::format("base: {}\nnew:  {}\n", args.positional[0], args.positional[1]));
  out(stepscope::format_comparison(stepscope::compare_reports(base, candidate)));
  return kOk;
}

#if STEPSCOPE_CLI_HAS_MERGE
// Merges, writes and prints; the exit code.
int merge_and_write(const std::vector<stepscope::Report>& reports, const std::string& path, const std::string& html,
                    bool quiet) {
  std::string why;
  const stepscope::Report merged = stepscope::merge_reports(reports, why);
  if (!why.empty()) {
    error("cannot merge: " + why);
    return kFailure;
  }
  if (!quiet) out(summary_of(merged));
  if (!write_report(merged, path)) return kFailure;
  std::fprintf(stderr, "stepscope: merged report of %zu ranks written to %s\n", reports.size(), path.c_str());
  if (!html.empty()) {
    if (!write_html(merged, html)) return kFailure;
    std::fprintf(stderr, "stepscope: HTML report written to %s\n", html.c_str());
  }
  return kOk;
}
#endif

int cmd_merge(const std::vector<std::string>& argv) {
  const Args args = parse(argv, {{"--out", "--html"}, {"--quiet"}, {{"-o", "--out"}, {"-q", "--quiet"}}});
  if (args.help) {
    out(kMergeHelp);
    return kOk;
  }
#if STEPSCOPE_CLI_HAS_MERGE
  if (args.positional.empty()) throw UsageError("merge needs at least one REPORT");
  std::vector<stepscope::Report> reports(args.positional.size());
  for (std::size_t i = 0; i < args.positional.size(); ++i)
    if (!load(args.positional[i], reports[i])) return kInputError;
  return merge_and_write(reports, get(args, "--out", "stepscope-merged.json"), get(args, "--html"),
                         flag(args, "--quiet"));
#else
  error("this stepscope was built without merge support (include/stepscope/merge.hpp was missing)");
  return kFailure;
#endif
}

int cmd_analyze(const std::vector<std::string>& argv) {
  const Args args =
      parse(argv, {{"--out", "--out-dir", "--html"}, {"--merge", "--quiet"}, {{"-o", "--out"}, {"-q", "--quiet"}}});
  if (args.help) {
    out(kAnalyzeHelp);
    return kOk;
  }
  const auto& traces = args.positional;
  if (traces.empty()) throw UsageError("analyze needs at least one TRACE");
  const bool merge = flag(args, "--merge");
  const bool quiet = flag(args, "--quiet");
  const std::string out_path = get(args, "--out");
  const std::string html = get(args, "--html");
  if (!merge && traces.size() > 1 && !out_path.empty())
    throw UsageError("-o names one report: with several traces use --out-dir, or --merge for one merged report");
  if (!merge && traces.size() > 1 && !html.empty()) throw UsageError("--html with several traces needs --merge");
#if !STEPSCOPE_CLI_HAS_MERGE
  if (merge) {
    error("this stepscope was built without merge support (include/stepscope/merge.hpp was missing)");
    return kFailure;
  }
#endif
  std::vector<stepscope::Report> reports(traces.size());
  for (std::size_t i = 0; i < traces.size(); ++i) {
    std::string why;
    if (!stepscope::analyze_trace_file(traces[i], reports[i], why)) {
      error(why);
      return kInputError;
    }
    if (!quiet) out(fmt::format("{}{}\n{}", i > 0 ? "\n" : "", traces[i], summary_of(reports[i])));
    std::string path = stem(traces[i]) + ".stepscope.json";
    if (!get(args, "--out-dir").empty()) path = get(args, "--out-dir") + "/" + base_name(path);
    if (!merge && !out_path.empty()) path = out_path;
    if (!write_report(reports[i], path)) return kFailure;
    std::fprintf(stderr, "stepscope: report written to %s\n", path.c_str());
    if (!merge && !html.empty()) {
      if (!write_html(reports[i], html)) return kFailure;
      std::fprintf(stderr, "stepscope: HTML report written to %s\n", html.c_str());
    }
  }
#if STEPSCOPE_CLI_HAS_MERGE
  if (merge) {
    if (!quiet) out("\n");
    return merge_and_write(reports, out_path.empty() ? "stepscope-merged.json" : out_path, html, quiet);
  }
#endif
  return kOk;
}

int cmd_html(const std::vector<std::string>& argv) {
  const Args args = parse(argv, {{"--out"}, {}, {{"-o", "--out"}}});
  if (args.help) {
    out(kHtmlHelp);
    return kOk;
  }
  if (args.positional.size() != 1) throw UsageError("html takes exactly one REPORT");
  stepscope::Report report;
  if (!load(args.positional[0], report)) return kInputError;
  const std::string path = get(args, "--out", stem(args.positional[0]) + ".html");
  if (!write_html(report, path)) return kFailure;
  std::fprintf(stderr, "stepscope: HTML report written to %s\n", path.c_str());
  return kOk;
}

int cmd_trace(const std::vector<std::string>& argv) {
  const Args args = parse(argv, {{}, {"--any-producer"}, {}});
  if (args.help) {
    out(kTraceHelp);
    return kOk;
  }
  if (args.positional.empty() || args.positional[0] != "validate")
    throw UsageError("trace: the only sub-command is 'validate TRACE'");
  if (args.positional.size() != 2) throw UsageError("trace validate takes exactly one TRACE");
  const std::string& path = args.positional[1];
  const auto check = stepscope::tools::check_chrome_trace(path, !flag(args, "--any-producer"));
  if (!check.readable) {
    error(check.read_error);
    return kInputError;
  }
  out(
      fmt::format("{}: {} events ({} complete, {} metadata, {} instant), {} process{}, {} thread{}, {} steps marked, "
                  "span {:.3f} ms, {}\n",
                  path, check.events, check.complete_events, check.metadata_events, check.instant_events,
                  check.processes, check.processes == 1 ? "" : "es", check.threads, check.threads == 1 ? "" : "s",
                  check.step_events, check.span_ms, check.sorted ? "sorted" : "NOT sorted"));
  if (check.problems.empty()) {
    out("valid\n");
    return kOk;
  }
  for (const auto& p : check.problems) out("problem: " + p + "\n");
  out("INVALID\n");
  return kFailure;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kMainHelp, stderr);
    return kUsage;
  }
  const std::string verb = args[0];
  args.erase(args.begin());
  if (verb == "-h" || verb == "--help" || verb == "help") {
    if (!args.empty()) {  // "stepscope help show" = "stepscope show --help"
      const std::string target = args[0];
      args = {"--help"};
      if (target == "show") return cmd_show(args);
      if (target == "diff") return cmd_diff(args);
      if (target == "merge") return cmd_merge(args);
      if (target == "analyze") return cmd_analyze(args);
      if (target == "html") return cmd_html(args);
      if (target == "trace") return cmd_trace(args);
    }
    out(kMainHelp);
    return kOk;
  }
  if (verb == "--version" || verb == "version") {
    out(fmt::format("stepscope {} (report schema {})\n", STEPSCOPE_VERSION_STRING, stepscope::kReportSchemaVersion));
    return kOk;
  }
  try {
    if (verb == "show") return cmd_show(args);
    if (verb == "diff") return cmd_diff(args);
    if (verb == "merge") return cmd_merge(args);
    if (verb == "analyze") return cmd_analyze(args);
    if (verb == "html") return cmd_html(args);
    if (verb == "trace") return cmd_trace(args);
    error("unknown verb '" + verb + "' (verbs: show, diff, merge, analyze, html, trace; see 'stepscope --help')");
    return kUsage;
  } catch (const UsageError& e) {
    error(std::string(e.what()) + " (see 'stepscope " + verb + " --help')");
    return kUsage;
  } catch (const std::exception& e) {
    error(e.what());
    return kFailure;
  }
}
