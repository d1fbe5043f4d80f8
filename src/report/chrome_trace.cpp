// Chrome-trace JSON export (Perfetto UI, chrome://tracing): the trace event
// format's "X" complete events with process/thread metadata.
#include <stepscope/trace.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <sys/stat.h>

#include <cstdio>
#include <map>

namespace stepscope {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool write_chrome_trace(const TraceCapture& capture, const RunInfo& run, const std::string& path, std::string& error) {
  try {
    using nlohmann::json;
    const int pid = run.rank >= 0 ? run.rank : 0;
    json events = json::array();
    const std::string process = run.rank >= 0 ? fmt::format("rank {} (pid {}, {})", run.rank, run.pid, run.host)
                                              : fmt::format("pid {} ({})", run.pid, run.host);
    events.push_back(json{{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process}}}});
    events.push_back(json{{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    std::map<std::int64_t, std::string> names;
    for (const auto& [tid, role] : capture.thread_names) names[tid] = fmt::format("{} (tid {})", role, tid);
    for (const auto& e : capture.events)
      if (e.device && !names.count(e.thread)) names[e.thread] = fmt::format("GPU stream {}", e.thread);
    for (const auto& e : capture.events)
      if (!names.count(e.thread)) names[e.thread] = fmt::format("thread {}", e.thread);
    for (const auto& [tid, name] : names)
      events.push_back(json{{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    // Timestamps in microseconds relative to the first event, so viewers do
    // not start hours into the machine's uptime.
    const std::int64_t origin = capture.events.empty() ? 0 : capture.events.front().start_ns;
    for (const auto& e : capture.events) {
      json ev{{"ph", "X"},
              {"name", e.is_step ? fmt::format("step {}", e.step) : e.name},
              {"cat", e.is_step ? "step" : (e.device ? "device" : to_string(e.kind))},
              {"pid", pid},
              {"tid", e.thread},
              {"ts", static_cast<double>(e.start_ns - origin) / 1000.0},
              {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1000.0},
              {"args", {{"step", e.step}, {"kind", to_string(e.kind)}, {"depth", e.depth}}}};
      events.push_back(std::move(ev));
      if (e.is_step)  // an instant marker at each step start, visible at any zoom
        events.push_back(json{{"ph", "i"}, {"s", "p"}, {"name", fmt::format("step {}", e.step)}, {"pid", pid}, {"tid", e.thread},
                              {"ts", static_cast<double>(e.start_ns - origin) / 1000.0}});
    }
    json doc{{"traceEvents", events},
             {"displayTimeUnit", "ms"},
             {"otherData",
              {{"producer", "stepscope " + run.library_version},
               {"window", capture.window},
               {"events_over_limit", capture.events_over_limit},
               {"origin_monotonic_ns", origin}}}};
    const std::string text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
    // Devices and FIFOs are written in place (never renamed over).
    struct stat st {};
    const bool special = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
    const std::string tmp = special ? path : path + ".tmp";
    if (ends_with(path, ".gz")) {
      gzFile f = gzopen(tmp.c_str(), "wb6");
      if (f == nullptr) {
        error = "cannot open '" + path + "' for writing";
        return false;
      }
      const int written = gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
      if (gzclose(f) != Z_OK || written != static_cast<int>(text.size())) {
        error = "cannot write '" + path + "'";
        std::remove(tmp.c_str());
        return false;
      }
    } else {
      std::FILE* f = std::fopen(tmp.c_str(), "wb");
      if (f == nullptr) {
        error = "cannot open '" + path + "' for writing";
        return false;
      }
      const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      if (std::fclose(f) != 0 || !ok) {
        error = "cannot write '" + path + "'";
        std::remove(tmp.c_str());
        return false;
      }
    }
    if (!special && std::rename(tmp.c_str(), path.c_str()) != 0) {
      error = "cannot rename '" + tmp + "' to '" + path + "'";
      std::remove(tmp.c_str());
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace stepscope
