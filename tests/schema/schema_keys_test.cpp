// The report's keys pinned to docs/report-schema.md (as google/benchmark pins
// its JSON output): real reports — a live run's final report, an imported
// PyTorch trace's, a merged job's — are written to JSON, and
//   - every key they hold is documented: at the top level and in each section
//     (`run`, `steps`, `phases[]`, ...) by name in that section, deeper keys by
//     name somewhere in the schema;
//   - every key a section's table documents appears in one of those reports
//     (the few that only some runs produce are listed below, with why).
// A field added to the writer without its line in the schema fails here, and
// so does a documented field the writer no longer writes.
#include <stepscope/merge.hpp>
#include <stepscope/stepscope.hpp>
#include "import/trace_import.hpp"

#include "common/files.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;
using stepscope_test::slurp;

namespace {

// The schema document, read as the reader does: sections named by the first
// backticked key of their heading, every backticked name in each section, and
// the first column of each section's table.
struct Schema {
  std::map<std::string, std::set<std::string>> names;       // section -> names mentioned in it
  std::map<std::string, std::set<std::string>> table_keys;  // section -> direct children its table lists
  std::set<std::string> all_names;
};

// Identifier-like words of a backticked span: "`clock.source`" -> clock, source;
// "`{file, line, host_ms}`" -> file, line, host_ms.
void words(const std::string& span, std::set<std::string>& out) {
  std::string word;
  for (char c : span + " ") {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      word += c;
    } else {
      if (!word.empty()) out.insert(word);
      word.clear();
    }
  }
}

std::vector<std::string> backticked(const std::string& line) {
  std::vector<std::string> spans;
  for (std::size_t at = line.find('`'); at != std::string::npos;) {
    const std::size_t end = line.find('`', at + 1);
    if (end == std::string::npos) break;
    spans.push_back(line.substr(at + 1, end - at - 1));
    at = line.find('`', end + 1);
  }
  return spans;
}

Schema read_schema(const std::string& path) {
  Schema schema;
  std::istringstream in(slurp(path));
  std::vector<std::string> current{"(top)"};
  bool in_report = true;  // false in the sections that are not the report ("Comparison JSON")
  std::string text;       // the section's text: a backticked span may run over two lines
  auto end_section = [&] {
    if (in_report)
      for (const auto& span : backticked(text)) {
        words(span, schema.all_names);
        for (const auto& section : current) words(span, schema.names[section]);
      }
    text.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0 || line.rfind("### ", 0) == 0) {
      end_section();
      current.clear();
      // The keys a heading names come before any remark in parentheses.
      for (const auto& span : backticked(line.substr(0, line.find('(')))) {
        current.push_back(span);
        // "### `device.hta`" documents the key hta of section device.
        const std::size_t dot = span.rfind('.');
        if (dot != std::string::npos) words(span.substr(dot + 1), schema.names[span.substr(0, dot)]);
      }
      in_report = line.find("Comparison") == std::string::npos;
      if (line == "## Top level") current.push_back("(top)");
      continue;
    }
    if (!in_report) continue;
    text += line + "\n";
    // A table row: "| `a`, `b.c` | ..." lists a, b as children of the section.
    if (line.rfind("| `", 0) == 0) {
      const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
      for (const auto& span : backticked(first_cell)) {
        std::string child = span.substr(0, span.find_first_of(".["));
        for (const auto& section : current) schema.table_keys[section].insert(child);
      }
    }
  }
  end_section();
  return schema;
}

// The object(s) at a section path in a report: "run", "phases[]", "device.hta".
std::vector<const json*> at_path(const json& report, const std::string& section) {
  std::vector<const json*> nodes{&report};
  std::string rest = section;
  while (!rest.empty()) {
    const std::size_t dot = rest.find('.');
    std::string part = rest.substr(0, dot);
    rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
    const bool each = part.size() > 2 && part.compare(part.size() - 2, 2, "[]") == 0;
    if (each) part.resize(part.size() - 2);
    std::vector<const json*> next;
    for (const json* n : nodes) {
      if (!n->is_object() || !n->contains(part)) continue;
      const json& child = (*n)[part];
      if (each && child.is_array()) {
        for (const auto& e : child) next.push_back(&e);
      } else if (!each) {
        next.push_back(&child);
      }
    }
    nodes = std::move(next);
  }
  return nodes;
}

// Maps whose keys are data, not schema: the user's set_config keys, a
// finding's values, the per-rank view (docs/multi-rank.md documents it).
bool free_form(const std::string& path) {
  return path == "run.config" || path == "run.config_types" || path.find(".values") != std::string::npos ||
         path == "ranks";
}

// Every key below `node`, with its path ("steps.wall_ms.mean"; array elements add nothing).
void collect_keys(const json& node, const std::string& path, std::map<std::string, std::string>& out) {
  if (free_form(path)) return;
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      const std::string child = path.empty() ? key : path + "." + key;
      out.emplace(child, key);
      collect_keys(value, child, out);
    }
  } else if (node.is_array()) {
    for (const auto& e : node) collect_keys(e, path, out);
  }
}

// A live run's final report: two phases in a few steps, written by finish().
json live_report(const std::string& dir) {
  ::setenv("STEPSCOPE_OUT", (dir + "/live.json").c_str(), 1);
  ::setenv("STEPSCOPE_QUIET", "1", 1);
  ::setenv("STEPSCOPE_WARMUP", "1", 1);
  stepscope::set_config("batch_size", 32.0);
  for (int step = 0; step < 8; ++step) {
    STEPSCOPE_STEP();
    { STEPSCOPE_PHASE("data"); }
    { STEPSCOPE_PHASE("forward"); }
  }
  const std::string path = stepscope::finish();
  REQUIRE(!path.empty());
  return json::parse(slurp(path));
}

stepscope::Report imported(const std::string& name) {
  const auto result = stepscope::import_kineto_trace(std::string(STEPSCOPE_TEST_DATA_DIR) + "/traces/" + name);
  INFO(name << ": " << result.error);
  REQUIRE(result.ok);
  return stepscope::report_from_timeline(result.trace, name);
}

// Documented keys that only some runs write; each says why none of the
// reports above has it.
const std::set<std::string> kNotInTheseReports = {
    "phases[].sites",         // a phase at more than one call site
    "phases[].sites_merged",  // with sites
    // A GPU run timed by CUDA events (steps.clock "device"): tests/gpu_sim checks them.
    "steps.host_wall_ms",
    "steps.host_breakdown",
    "phases[].host_share_of_step",
    // Steps in two or more steps() loops: aggregator_test and merge_test check it.
    "steps.within_loop_stddev_ms",
};

}  // namespace

TEST_CASE("report keys match docs/report-schema.md", "[schema]") {
  const Schema schema = read_schema(std::string(STEPSCOPE_SOURCE_DIR) + "/docs/report-schema.md");
  REQUIRE(schema.table_keys.count("(top)"));
  REQUIRE(schema.table_keys.count("run"));

  char tmpl[] = "/tmp/stepscope-schema-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::vector<json> reports;
  reports.push_back(live_report(dir));
  const stepscope::Report trace = imported("v100_single_rank_compute.json.gz");
  reports.push_back(json::parse(stepscope::report_to_json(trace)));
  std::string error;
  const stepscope::Report job = stepscope::merge_reports(
      {imported("sampled_128rank_rank0.json.gz"), imported("sampled_128rank_rank1.json.gz")}, error);
  INFO(error);
  REQUIRE(job.ranks);
  reports.push_back(json::parse(stepscope::report_to_json(job)));
  std::system(("rm -rf '" + dir + "'").c_str());

  const std::vector<std::string> sections = {"(top)",  "run",        "steps",      "phases[]",   "system",
                                             "device", "device.hta", "bottleneck", "findings[]", "what_if[]"};
  std::map<std::string, std::set<std::string>> present;  // section -> direct children seen
  for (const json& report : reports) {
    for (const auto& section : sections) {
      const auto nodes = section == "(top)" ? std::vector<const json*>{&report} : at_path(report, section);
      for (const json* node : nodes) {
        if (!node->is_object()) continue;
        for (const auto& [key, value] : node->items()) {
          present[section].insert(key);
          INFO("section " << section << ", key " << key);
          CHECK(schema.names.at(section).count(key) == 1);  // written but not documented there
        }
      }
    }
    std::map<std::string, std::string> keys;
    collect_keys(report, "", keys);
    for (const auto& [path, key] : keys) {
      INFO("key " << path);
      CHECK(schema.all_names.count(key) == 1);  // written but documented nowhere
    }
  }
  for (const auto& section : sections) {
    if (!schema.table_keys.count(section)) continue;
    for (const auto& key : schema.table_keys.at(section)) {
      if (kNotInTheseReports.count(section + "." + key)) continue;
      INFO("section " << section << ", documented key " << key);
      CHECK(present[section].count(key) == 1);  // documented but written by none of the reports
    }
  }
}

// The device facts are typed members (stepscope/report.hpp); their JSON keys
// come from one list, for_each_device_fact(). Every key of that list is
// documented in the schema's `device` section, each goes through the JSON and
// back to its own member, and a fact that was not measured stays absent: it
// is not written, and it does not come back as 0.
TEST_CASE("every device fact is documented and goes through the JSON as itself", "[schema][device]") {
  const Schema schema = read_schema(std::string(STEPSCOPE_SOURCE_DIR) + "/docs/report-schema.md");
  stepscope::Report report;
  double next = 1.5;
  std::set<std::string> keys;
  stepscope::for_each_device_fact(
      [&](const char* key, std::optional<double>& value) {
        INFO("device fact " << key);
        CHECK(schema.names.at("device").count(key) == 1);  // a fact the schema does not document
        CHECK(keys.insert(key).second);                    // one key, one member
        value = next;
        next += 1.0;
      },
      report.device.facts);
  CHECK(keys.size() >= 59);  // the facts of today's writers (import, CUDA events, CUPTI)

  const json written = json::parse(stepscope::report_to_json(report));
  CHECK(written["device"]["facts"].size() == keys.size());
  stepscope::Report loaded;
  std::string error;
  REQUIRE(stepscope::report_from_json(written.dump(), loaded, error));
  stepscope::for_each_device_fact(
      [](const char* key, const std::optional<double>& before, const std::optional<double>& after) {
        INFO("device fact " << key);
        REQUIRE(after.has_value());
        CHECK(*after == *before);  // each value back in its own member
      },
      report.device.facts, loaded.device.facts);

  // Not measured: absent in the JSON and absent after loading, never 0.
  stepscope::Report none;
  none.device.facts.sync_calls_in_steps = 0.0;  // measured zero is kept
  const json sparse = json::parse(stepscope::report_to_json(none));
  CHECK(sparse["device"]["facts"] == json{{"sync_calls_in_steps", 0.0}});
  stepscope::Report back;
  REQUIRE(stepscope::report_from_json(sparse.dump(), back, error));
  CHECK(back.device.facts.sync_calls_in_steps == 0.0);
  CHECK_FALSE(back.device.facts.sync_calls.has_value());
  CHECK_FALSE(back.device.facts.device_busy_fraction.has_value());

  // A key this stepscope does not know (another version's, or an old alias)
  // is ignored, not an error, and not read as another fact.
  json other = sparse;
  other["device"]["facts"]["idle_fraction"] = 0.5;
  stepscope::Report tolerant;
  REQUIRE(stepscope::report_from_json(other.dump(), tolerant, error));
  CHECK_FALSE(tolerant.device.facts.device_idle_fraction.has_value());
}

TEST_CASE("each phase kind's part goes through the JSON under its own name", "[schema][kinds]") {
  // One table orders and names the kinds (stepscope::kPhaseKinds,
  // kPhaseKindNames); the breakdown, the series and the per-rank rows hold a
  // PerKind and write each part as "<name>_ms", the key the schema documents.
  using stepscope::PhaseKind;
  const Schema schema = read_schema(std::string(STEPSCOPE_SOURCE_DIR) + "/docs/report-schema.md");
  stepscope::Report report;
  report.steps.breakdown.wall_ms = 100;
  stepscope::RankSummary rank;
  rank.rank = 0;
  double next = 1.5;  // a different value for each kind and place
  for (PhaseKind k : stepscope::kPhaseKinds) {
    report.steps.breakdown.kind_ms[k] = next;
    report.steps.series.kind_ms[k] = {next + 0.25, next + 0.5};
    rank.kind_ms[k] = next + 0.75;
    next += 1.0;
  }
  stepscope::SlowStep slow;
  slow.step = 51;
  slow.wall_ms = 80.5;
  slow.unattributed_ms = 52.25;
  slow.between_steps_ms = 0.125;
  for (PhaseKind k : stepscope::kPhaseKinds) slow.kind_ms[k] = report.steps.breakdown.kind_ms[k] + 0.0625;
  report.steps.slowest.push_back(slow);
  report.ranks.emplace();
  report.ranks->ranks.push_back(rank);

  const json written = json::parse(stepscope::report_to_json(report));
  std::set<std::string> names;
  for (PhaseKind k : stepscope::kPhaseKinds) {
    const std::string key = std::string(stepscope::phase_kind_name(k)) + "_ms";
    INFO("kind part " << key);
    CHECK(names.insert(key).second);  // one name per kind
    CHECK(schema.names.at("steps").count(key) == 1);
    CHECK(std::string(stepscope::to_string(k)) == stepscope::phase_kind_name(k));
    PhaseKind parsed = PhaseKind::other;
    CHECK(stepscope::parse_phase_kind(stepscope::phase_kind_name(k), parsed));
    CHECK(parsed == k);
    CHECK(written.at("steps").at("breakdown").at(key) == report.steps.breakdown.kind_ms[k]);
    CHECK(written.at("steps").at("series").at(key) == json(report.steps.series.kind_ms[k]));
    CHECK(written.at("steps").at("slowest").at(0).at(key) == slow.kind_ms[k]);
    CHECK(written.at("ranks").at("ranks").at(0).at(key) == rank.kind_ms[k]);
  }
  CHECK(names.size() == stepscope::kPhaseKindCount);

  stepscope::Report loaded;
  std::string error;
  REQUIRE(stepscope::report_from_json(written.dump(), loaded, error));
  REQUIRE(loaded.ranks.has_value());
  REQUIRE(loaded.ranks->ranks.size() == 1);
  for (PhaseKind k : stepscope::kPhaseKinds) {
    INFO("kind " << stepscope::phase_kind_name(k));
    CHECK(loaded.steps.breakdown.kind_ms[k] == report.steps.breakdown.kind_ms[k]);  // back in its own slot
    CHECK(loaded.steps.series.kind_ms[k] == report.steps.series.kind_ms[k]);
    CHECK(loaded.ranks->ranks[0].kind_ms[k] == rank.kind_ms[k]);
    CHECK(loaded.steps.slowest.at(0).kind_ms[k] == slow.kind_ms[k]);
  }
  // The slowest steps' other fields, and a list longer than a report holds is cut to its bound.
  REQUIRE(loaded.steps.slowest.size() == 1);
  CHECK(loaded.steps.slowest[0].step == 51);
  CHECK(loaded.steps.slowest[0].wall_ms == 80.5);
  CHECK(loaded.steps.slowest[0].unattributed_ms == 52.25);
  CHECK(loaded.steps.slowest[0].between_steps_ms == 0.125);
  json long_list = written;
  for (int i = 0; i < 100; ++i) long_list["steps"]["slowest"].push_back(written["steps"]["slowest"][0]);
  stepscope::Report cut;
  REQUIRE(stepscope::report_from_json(long_list.dump(), cut, error));
  CHECK(cut.steps.slowest.size() == stepscope::StepStats::kSlowestStepsKept);

  // A kind outside the enum (a corrupt record) is `other`, in the container and by name.
  const auto corrupt = static_cast<PhaseKind>(200);
  stepscope::PerKind<double> parts;
  parts[corrupt] = 7;
  CHECK(parts[PhaseKind::other] == 7);
  CHECK(std::string(stepscope::phase_kind_name(corrupt)) == stepscope::phase_kind_name(PhaseKind::other));
}

TEST_CASE("the run's interruption goes through the JSON, and a report without one reads back without one", "[schema]") {
  stepscope::Report report;
  report.ended_by = "exit";
  report.interrupted = stepscope::Report::Interruption{"SIGINT", 12.5};
  const json written = json::parse(stepscope::report_to_json(report));
  CHECK(written.at("interrupted").at("signal") == "SIGINT");
  CHECK(written.at("interrupted").at("after_s") == 12.5);
  stepscope::Report loaded;
  std::string error;
  REQUIRE(stepscope::report_from_json(written.dump(), loaded, error));
  REQUIRE(loaded.interrupted.has_value());
  CHECK(loaded.interrupted->signal == "SIGINT");
  CHECK(loaded.interrupted->after_s == 12.5);
  CHECK(stepscope::format_summary(loaded).find("run interrupted by SIGINT (Ctrl-C) 12.5 s into recording") !=
        std::string::npos);

  report.interrupted.reset();
  const json none = json::parse(stepscope::report_to_json(report));
  CHECK(none.at("interrupted").is_null());
  REQUIRE(stepscope::report_from_json(none.dump(), loaded, error));
  CHECK_FALSE(loaded.interrupted.has_value());
  CHECK(stepscope::format_summary(loaded).find("interrupted") == std::string::npos);
}

TEST_CASE("the run's uncaught exception goes through the JSON and the summary says how it ended", "[schema]") {
  stepscope::Report report;
  report.ended_by = "exit";  // Python: the interpreter exits through its hooks after printing it
  report.exception = stepscope::Report::UncaughtException{"torch.cuda.OutOfMemoryError", "CUDA out of memory.", 61.25};
  const json written = json::parse(stepscope::report_to_json(report));
  CHECK(written.at("exception").at("type") == "torch.cuda.OutOfMemoryError");
  CHECK(written.at("exception").at("message") == "CUDA out of memory.");
  CHECK(written.at("exception").at("after_s") == 61.25);
  stepscope::Report loaded;
  std::string error;
  REQUIRE(stepscope::report_from_json(written.dump(), loaded, error));
  REQUIRE(loaded.exception.has_value());
  CHECK(loaded.exception->type == "torch.cuda.OutOfMemoryError");
  CHECK(loaded.exception->after_s == 61.25);
  CHECK(stepscope::format_summary(loaded).find("run ended by an uncaught exception 61.2 s into recording "
                                               "(torch.cuda.OutOfMemoryError: CUDA out of memory.)") !=
        std::string::npos);

  // C++: std::terminate wrote it; a message from a file is printed safely.
  loaded.ended_by = "terminate";
  loaded.exception->type = "std::runtime_error";
  loaded.exception->message = "bad\x1b]0;owned\a";
  const std::string summary = stepscope::format_summary(loaded);
  CHECK(summary.find("run ended by std::terminate 61.2 s into recording: uncaught exception std::runtime_error: "
                     "bad\\x1b]0;owned\\x07") != std::string::npos);
  CHECK(summary.find("\x1b") == std::string::npos);
  loaded.exception.reset();
  CHECK(stepscope::format_summary(loaded).find("run ended by std::terminate (no exception in flight") !=
        std::string::npos);

  report.exception.reset();  // older reports have no field at all; a run without one writes null
  const json none = json::parse(stepscope::report_to_json(report));
  CHECK(none.at("exception").is_null());
  json older = none;
  older.erase("exception");
  REQUIRE(stepscope::report_from_json(older.dump(), loaded, error));
  CHECK_FALSE(loaded.exception.has_value());
  CHECK(stepscope::format_summary(loaded).find("exception") == std::string::npos);
}
