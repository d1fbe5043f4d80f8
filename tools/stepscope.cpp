// The `stepscope` command-line tool: look at, compare, merge and produce
// reports. Verbs, options and exit codes: docs/cli.md.
//
//   stepscope show stepscope-report.json
//   stepscope diff base.json new.json
//   stepscope analyze rank0.json.gz -o rank0.stepscope.json
//   stepscope html stepscope-report.json -o report.html
#include "process_heap.hpp"
#include "trace_check.hpp"

#include "text/printable.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/html.hpp>
#include <stepscope/report.hpp>
#include <stepscope/version.hpp>
#include "import/trace_import.hpp"

#if __has_include(<stepscope/merge.hpp>)
#include <stepscope/merge.hpp>
#define STEPSCOPE_CLI_HAS_MERGE 1
#else
#define STEPSCOPE_CLI_HAS_MERGE 0
#endif

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
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

// A bad command line: the message, then a pointer to the verb's --help.
class UsageError : public std::exception {
 public:
  explicit UsageError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Messages and printed text carry names from files and command lines (phase
// names, hosts, paths, parser excerpts): never raw control characters.
void error(const std::string& message) {
  std::fprintf(stderr, "stepscope: error: %s\n", stepscope::detail::printable(message).c_str());
}

void warning(const std::string& message) {
  std::fprintf(stderr, "stepscope: warning: %s\n", stepscope::detail::printable(message).c_str());
}

// Flushed at once, so that stdout and stderr read in order where both go to one file.
void out(const std::string& text) {
  const std::string safe = stepscope::detail::printable_lines(text);
  std::fwrite(safe.data(), 1, safe.size(), stdout);
  std::fflush(stdout);
}

// JSON output is escaped by the serialiser already (and must stay JSON).
void out_json(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string quoted(const std::string& path) {
  return "'" + path + "'";
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

constexpr const char* kShowHelp = R"(usage: stepscope show REPORT [--json] [--reanalyze] [--hta] [--operators]

Prints the report's summary: step statistics, the step breakdown, the phases,
the verdict with its evidence, recommendations, what-if projections, findings
and dropped records. A merged report also gets its per-rank table.

options:
  --json        print the report as JSON instead (normalised, schema version
                checked); with --reanalyze, the re-analysed report
  --reanalyze   run this stepscope's analyzer again on the report's facts
                (verdict, findings and what-if from the current rules)
  --hta         also print Holistic Trace Analysis' tables (temporal, kernel
                type, idle time, launch statistics) of an imported trace
  --operators   also print each phase's top operators (aten:: ops and GPU
                kernels by self time) of an imported trace
)";

constexpr const char* kDiffHelp = R"(usage: stepscope diff BASE NEW [--json]
       stepscope diff BASE... --vs NEW... [--json]

Compares two reports: the step and each phase (mean ms, delta, noise and
whether the delta is significant), the verdicts, and which set_config() values
changed. Warns when more than one value changed: change one variable at a time.
One run each: the step's noise comes from batch means over each run's step
series (steps are autocorrelated), and a change below 8% (or below a run's own
drift between its halves) is within noise, since separate runs of the same
binary differ by that much. With repeats (--vs) the noise is the spread between
runs and smaller changes can be told. When the machine conditions of the runs
differ (CPU wait, other processes' CPU, load), a line says so before any verdict.
Exit code 0 whenever the reports could be read.

options:
  --vs NEW...  the new side's repeats; the reports before it are the base's
  --json       print the comparison as JSON (step.verdict: faster, slower or
               within_noise; conditions.differ and conditions.reasons)
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
    R"(usage: stepscope analyze TRACE... [-o OUT] [--out-dir DIR] [--merge] [--html FILE] [--hta] [--operators]

Builds a stepscope report from PyTorch-profiler / Kineto Chrome traces (.json
or .json.gz): steps from ProfilerStep#N, phases from user annotations, device
facts from the GPU timeline, then the verdict. Prints the breakdown and the
verdict of each trace and writes the same JSON report a live run writes.

options:
  -o, --out FILE   the report file (one trace; with --merge: the merged report).
                   Default: <trace without .json/.gz>.stepscope.json
  --out-dir DIR    write the per-trace reports into DIR, made if missing (default: beside
                   each trace)
  --merge          several traces of one job's ranks: also merge their reports
                   (default output stepscope-merged.json)
  --html FILE      also write the HTML page (one trace, or the merged report)
  --hta            also print Holistic Trace Analysis' tables of each trace, with
                   HTA's definitions and names (device.hta in the report)
  --operators      also print each phase's top operators (aten:: ops and GPU kernels
                   by self time; phases[].top_operators in the report)
  --max-events N   refuse a trace with more than N events (default 10000000, about
                   1.3 GB of memory at most; also bounds an endless input)
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

// What the command line asked for; filled by CLI11 (build_command_line).
struct Options {
  std::vector<std::string> inputs;  // positional arguments of the verb
  std::string out, out_dir, html;
  bool json = false, reanalyze = false, merge = false, quiet = false, any_producer = false, hta = false,
       operators = false;
  bool help = false;
  std::uint64_t max_events = stepscope::ImportOptions{}.max_events;  // analyze
  std::vector<std::string> extras;  // what CLI11 did not recognise (unknown options, stray words)
  std::vector<std::string> vs;      // diff: the new side's repeats (after --vs)
};

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
  error("cannot write the report to " + quoted(path) + ": " + why);
  return false;
}

// The report of an analysed trace: derived data, written without fsync (write_trace_report_file).
bool write_analyzed(const stepscope::Report& report, const std::string& path) {
  std::string why;
  if (stepscope::write_trace_report_file(report, path, why)) return true;
  error("cannot write the report to " + quoted(path) + ": " + why);
  return false;
}

bool write_html(const stepscope::Report& report, const std::string& path) {
  std::string why;
  if (stepscope::write_html_report(report, path, why)) return true;
  error("cannot write the page to " + quoted(path) + ": " + why);
  return false;
}

std::string summary_of(const stepscope::Report& report) {
  std::string text = stepscope::format_summary(report);
#if STEPSCOPE_CLI_HAS_MERGE
  if (report.ranks) text += stepscope::format_multi_rank(report);
#endif
  return text;
}

int cmd_show(const Options& o) {
  if (o.inputs.size() != 1) throw UsageError("show takes exactly one REPORT");
  stepscope::Report report;
  if (!load(o.inputs[0], report)) return kInputError;
  if (o.reanalyze) stepscope::analyze(report);
  if (o.json)
    out_json(stepscope::report_to_json(report) + "\n");
  else
    out(summary_of(report));
  if (o.hta && !o.json) out(stepscope::format_hta(report));
  if (o.operators && !o.json) out(stepscope::format_top_operators(report));
  return kOk;
}

int cmd_diff(const Options& o) {
  // "diff BASE NEW", or repeats: "diff BASE... --vs NEW...".
  std::vector<std::string> base_paths = o.inputs, new_paths = o.vs;
  if (new_paths.empty()) {
    if (o.inputs.size() != 2) throw UsageError("diff takes two reports: BASE NEW (or repeats: BASE... --vs NEW...)");
    base_paths = {o.inputs[0]};
    new_paths = {o.inputs[1]};
  } else if (base_paths.empty()) {
    throw UsageError("diff --vs needs the base reports before it: BASE... --vs NEW...");
  }
  std::vector<stepscope::Report> base(base_paths.size()), candidate(new_paths.size());
  for (std::size_t i = 0; i < base_paths.size(); ++i)
    if (!load(base_paths[i], base[i])) return kInputError;
  for (std::size_t i = 0; i < new_paths.size(); ++i)
    if (!load(new_paths[i], candidate[i])) return kInputError;
  const stepscope::Comparison comparison = stepscope::compare_runs(base, candidate);
  if (o.json) {
    out_json(stepscope::comparison_to_json(comparison) + "\n");
    return kOk;
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& p : v) s += (s.empty() ? "" : " ") + p;
    return s;
  };
  out(fmt::format("base: {}\nnew:  {}\n", join(base_paths), join(new_paths)));
  out(stepscope::format_comparison(comparison));
  return kOk;
}

#if STEPSCOPE_CLI_HAS_MERGE
// Merges, writes and prints; the exit code. The merge's warnings (world sizes
// that disagree, duplicate or missing ranks) go to stderr as well as into the
// report: a merge of mismatched reports must not look clean.
int merge_and_write(const std::vector<stepscope::Report>& reports, const std::string& path, const std::string& html,
                    bool quiet) {
  std::string why;
  const stepscope::Report merged = stepscope::merge_reports(reports, why);
  if (!why.empty()) {
    error("cannot merge: " + why);
    return kFailure;
  }
  for (const std::string& w : merged.warnings) warning(w);
  if (!quiet) out(summary_of(merged));
  if (!write_report(merged, path)) return kFailure;
  const int ranks = merged.ranks ? merged.ranks->ranks_merged : 0;  // ranks, not files: duplicates are not counted
  std::fprintf(stderr, "stepscope: merged report of %d rank%s written to %s\n", ranks, ranks == 1 ? "" : "s",
               stepscope::detail::printable(path).c_str());
  if (!html.empty()) {
    if (!write_html(merged, html)) return kFailure;
    std::fprintf(stderr, "stepscope: HTML report written to %s\n", stepscope::detail::printable(html).c_str());
  }
  return kOk;
}
#endif

int cmd_merge(const Options& o) {
#if STEPSCOPE_CLI_HAS_MERGE
  if (o.inputs.empty()) throw UsageError("merge needs at least one REPORT");
  std::vector<stepscope::Report> reports(o.inputs.size());
  for (std::size_t i = 0; i < o.inputs.size(); ++i)
    if (!load(o.inputs[i], reports[i])) return kInputError;
  return merge_and_write(reports, o.out.empty() ? "stepscope-merged.json" : o.out, o.html, o.quiet);
#else
  (void)o;
  error("this stepscope was built without merge support (include/stepscope/merge.hpp was missing)");
  return kFailure;
#endif
}

int cmd_analyze(const Options& o) {
  const auto& traces = o.inputs;
  if (traces.empty()) throw UsageError("analyze needs at least one TRACE");
  if (!o.merge && traces.size() > 1 && !o.out.empty())
    throw UsageError("-o names one report: with several traces use --out-dir, or --merge for one merged report");
  if (!o.merge && traces.size() > 1 && !o.html.empty()) throw UsageError("--html with several traces needs --merge");
#if !STEPSCOPE_CLI_HAS_MERGE
  if (o.merge) {
    error("this stepscope was built without merge support (include/stepscope/merge.hpp was missing)");
    return kFailure;
  }
#endif
  if (!o.out_dir.empty()) {  // as tensorboard_trace_handler makes its log directory
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec && !std::filesystem::is_directory(o.out_dir)) {
      error(fmt::format("cannot create the output directory '{}': {}", stepscope::detail::printable(o.out_dir),
                        ec.message()));
      return kFailure;
    }
  }
  std::vector<stepscope::Report> reports(traces.size());
  for (std::size_t i = 0; i < traces.size(); ++i) {
    std::string why;
    stepscope::ImportOptions import_options;
    import_options.max_events = o.max_events;
    if (!stepscope::analyze_trace_file(traces[i], import_options, reports[i], why)) {
      error(why);
      return kInputError;
    }
    if (!o.quiet) out(fmt::format("{}{}\n{}", i > 0 ? "\n" : "", traces[i], summary_of(reports[i])));
    if (o.hta) out(stepscope::format_hta(reports[i]));
    if (o.operators) out(stepscope::format_top_operators(reports[i]));
    std::string path = stem(traces[i]) + ".stepscope.json";
    if (!o.out_dir.empty()) path = o.out_dir + "/" + base_name(path);
    if (!o.merge && !o.out.empty()) path = o.out;
    if (!write_analyzed(reports[i], path)) return kFailure;
    std::fprintf(stderr, "stepscope: report written to %s\n", stepscope::detail::printable(path).c_str());
    if (!o.merge && !o.html.empty()) {
      if (!write_html(reports[i], o.html)) return kFailure;
      std::fprintf(stderr, "stepscope: HTML report written to %s\n", stepscope::detail::printable(o.html).c_str());
    }
  }
#if STEPSCOPE_CLI_HAS_MERGE
  if (o.merge) {
    if (!o.quiet) out("\n");
    return merge_and_write(reports, o.out.empty() ? "stepscope-merged.json" : o.out, o.html, o.quiet);
  }
#endif
  return kOk;
}

int cmd_html(const Options& o) {
  if (o.inputs.size() != 1) throw UsageError("html takes exactly one REPORT");
  stepscope::Report report;
  if (!load(o.inputs[0], report)) return kInputError;
  const std::string path = o.out.empty() ? stem(o.inputs[0]) + ".html" : o.out;
  if (!write_html(report, path)) return kFailure;
  std::fprintf(stderr, "stepscope: HTML report written to %s\n", stepscope::detail::printable(path).c_str());
  return kOk;
}

int cmd_trace_validate(const Options& o) {
  if (o.inputs.size() != 1) throw UsageError("trace validate takes exactly one TRACE");
  const std::string& path = o.inputs[0];
  const auto check = stepscope::tools::check_chrome_trace(path, !o.any_producer);
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

// ---- command line -------------------------------------------------------------

// One verb: its CLI11 sub-app, its help text and what runs it. "trace
// validate" is a verb of two words (trace has only this sub-command).
struct Verb {
  const char* name;
  const char* help;
  std::function<int(const Options&)> run;
  CLI::App* app = nullptr;
};

// The options of every verb. CLI11 parses them ("--out FILE", "--out=FILE",
// "-o FILE", "-qo FILE", "--" ends the options, a value-taking option without
// its value is an error); the help texts above are ours (docs/cli.md shows
// them), so CLI11's generated help is off and -h/--help is a plain flag.
void add_verbs(CLI::App& app, std::vector<Verb>& verbs, Options& o) {
  auto sub = [&](CLI::App& parent, const char* name, const char* positional) {
    CLI::App* s = parent.add_subcommand(name);
    s->set_help_flag();
    s->allow_extras();  // reported by us, in our words (unknown option '--x')
    s->add_flag("-h,--help", o.help);
    if (positional != nullptr) s->add_option(positional, o.inputs)->expected(0, -1);
    return s;
  };
  CLI::App* show = sub(app, "show", "REPORT");
  show->add_flag("--json", o.json);
  show->add_flag("--reanalyze", o.reanalyze);
  show->add_flag("--hta", o.hta);
  show->add_flag("--operators", o.operators);
  CLI::App* diff = sub(app, "diff", "BASE_NEW");
  diff->add_flag("--json", o.json);
  diff->add_option("--vs", o.vs)->expected(1, -1);
  CLI::App* merge = sub(app, "merge", "REPORT");
  merge->add_option("-o,--out", o.out);
  merge->add_option("--html", o.html);
  merge->add_flag("-q,--quiet", o.quiet);
  CLI::App* analyze = sub(app, "analyze", "TRACE");
  analyze->add_option("-o,--out", o.out);
  analyze->add_option("--out-dir", o.out_dir);
  analyze->add_flag("--merge", o.merge);
  analyze->add_flag("--hta", o.hta);
  analyze->add_flag("--operators", o.operators);
  analyze->add_option("--html", o.html);
  analyze->add_flag("-q,--quiet", o.quiet);
  analyze->add_option("--max-events", o.max_events)->check(CLI::PositiveNumber);
  CLI::App* html = sub(app, "html", "REPORT");
  html->add_option("-o,--out", o.out);
  CLI::App* trace = sub(app, "trace", nullptr);
  CLI::App* validate = sub(*trace, "validate", "TRACE");
  validate->add_flag("--any-producer", o.any_producer);
  verbs = {{"show", kShowHelp, cmd_show, show},     {"diff", kDiffHelp, cmd_diff, diff},
           {"merge", kMergeHelp, cmd_merge, merge}, {"analyze", kAnalyzeHelp, cmd_analyze, analyze},
           {"html", kHtmlHelp, cmd_html, html},     {"trace validate", kTraceHelp, cmd_trace_validate, validate},
           {"trace", kTraceHelp, nullptr, trace}};
}

// CLI11's message for a parse error, in the words docs/cli.md shows.
std::string usage_message(const CLI::ParseError& e) {
  std::string what = e.what();
  // "-o: 1 required TEXT missing" (ArgumentMismatch) -> "option -o needs a value"
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    const auto colon = what.find(':');
    if (colon != std::string::npos && what.find("missing") != std::string::npos)
      return "option " + what.substr(0, colon) + " needs a value";
  }
  return what;
}

int run_command_line(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kMainHelp, stderr);
    return kUsage;
  }
  CLI::App app{"", "stepscope"};
  app.set_help_flag();
  app.require_subcommand(1);
  Options o;
  std::vector<Verb> verbs;
  add_verbs(app, verbs, o);
  auto find_verb = [&](const std::string& name) -> const Verb* {
    for (const Verb& v : verbs)
      if (name == v.name) return &v;
    return nullptr;
  };
  const std::string& first = args[0];
  if (first == "-h" || first == "--help" || first == "help") {
    const Verb* v = args.size() > 1 ? find_verb(args[1]) : nullptr;  // "stepscope help show" = "show --help"
    out(v != nullptr ? v->help : kMainHelp);
    return kOk;
  }
  if (first == "--version" || first == "version") {
    out(fmt::format("stepscope {} (report schema {})\n", STEPSCOPE_VERSION_STRING, stepscope::kReportSchemaVersion));
    return kOk;
  }
  if (find_verb(first) == nullptr) {
    error("unknown verb " + quoted(first) +
          " (verbs: show, diff, merge, analyze, html, trace; see 'stepscope --help')");
    return kUsage;
  }
  try {
    // "--" ends the options. CLI11 2.1 hands what follows it in a sub-command
    // to the parent app, so the tail is split off here and taken as arguments.
    std::vector<std::string> words(args.begin(), args.end()), after_dashes;
    if (const auto dashes = std::find(words.begin(), words.end(), "--"); dashes != words.end()) {
      after_dashes.assign(dashes + 1, words.end());
      words.erase(dashes, words.end());
    }
    std::reverse(words.begin(), words.end());  // CLI11 takes a vector as a stack: last argument first
    try {
      app.parse(words);
    } catch (const CLI::ParseError& e) {
      throw UsageError(usage_message(e));
    }
    o.inputs.insert(o.inputs.end(), after_dashes.begin(), after_dashes.end());
    // The deepest verb given ("trace validate" rather than "trace").
    const Verb* verb = nullptr;
    for (const Verb& v : verbs)
      if (v.app->parsed() && (verb == nullptr || v.app->get_parent() == verb->app)) verb = &v;
    if (verb == nullptr) throw UsageError("no verb");
    if (o.help) {
      out(verb->help);
      return kOk;
    }
    if (!verb->run) throw UsageError("trace: the only sub-command is 'validate TRACE'");
    for (const std::string& extra : verb->app->remaining()) {
      if (extra.size() > 1 && extra[0] == '-') throw UsageError("unknown option " + quoted(extra));
      throw UsageError(std::string(verb->name) == "trace" ? "trace: the only sub-command is 'validate TRACE'"
                                                          : "unexpected argument " + quoted(extra));
    }
    try {
      return verb->run(o);
    } catch (const UsageError& e) {
      error(std::string(e.what()) + " (see 'stepscope " + verb->name + " --help')");
      return kUsage;
    }
  } catch (const UsageError& e) {
    error(std::string(e.what()) + " (see 'stepscope " + first + " --help')");
    return kUsage;
  }
}

}  // namespace

// Never throws: whatever goes wrong is one line on stderr and an exit code.
int main(int argc, char** argv) {
  stepscope_cli::prepare_process_heap();  // before the first large block (tools/process_heap.cpp)
  // A reader that leaves (`| head`) must not kill the command before it has
  // written its report: printing then fails quietly, the files are written.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run_command_line(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fputs("stepscope: error: out of memory\n", stderr);
    return kFailure;
  } catch (const std::exception& e) {
    error(e.what());
    return kFailure;
  } catch (...) {
    std::fputs("stepscope: error: unexpected failure\n", stderr);
    return kFailure;
  }
}
