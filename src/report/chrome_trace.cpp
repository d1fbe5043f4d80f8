// Chrome-trace JSON export (Perfetto UI, chrome://tracing): the trace event
// format's "X" complete events with process/thread metadata.
#include "core/trace.hpp"

#include "core/atomic_file.hpp"

#include <fmt/format.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace stepscope {
inline namespace v1 {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole text as one gzip member (level 6), in memory: the file is then
// written in one piece by the atomic writer.
std::string gzip(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: cannot start deflate");
  std::string out;
  char buf[1 << 16];
  std::size_t fed = 0;
  int rc = Z_OK;
  do {  // in pieces: zlib counts in 32-bit units, a trace can be larger
    if (z.avail_in == 0 && fed < text.size()) {
      const std::size_t piece = std::min<std::size_t>(text.size() - fed, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data() + fed));
      z.avail_in = static_cast<uInt>(piece);
      fed += piece;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = deflate(&z, fed == text.size() ? Z_FINISH : Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  } while (rc == Z_OK || rc == Z_BUF_ERROR);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: deflate failed");
  return out;
}

}  // namespace

bool write_chrome_trace(const TraceCapture& capture, const RunInfo& run, const std::string& path, std::string& error) {
  try {
    using nlohmann::json;
    const int pid = run.rank >= 0 ? run.rank : 0;
    json events = json::array();
    const std::string process = run.rank >= 0 ? fmt::format("rank {} (pid {}, {})", run.rank, run.pid, run.host)
                                              : fmt::format("pid {} ({})", run.pid, run.host);
    events.push_back(
        json{{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process}}}});
    events.push_back(
        json{{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    std::map<std::int64_t, std::string> names;
    for (const auto& [tid, role] : capture.thread_names) names[tid] = fmt::format("{} (tid {})", role, tid);
    for (const auto& e : capture.events)
      if (e.device && !names.count(e.thread)) names[e.thread] = fmt::format("GPU stream {}", e.thread);
    for (const auto& e : capture.events)
      if (!names.count(e.thread)) names[e.thread] = fmt::format("thread {}", e.thread);
    for (const auto& [tid, name] : names)
      events.push_back(
          json{{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
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
        events.push_back(json{{"ph", "i"},
                              {"s", "p"},
                              {"name", fmt::format("step {}", e.step)},
                              {"pid", pid},
                              {"tid", e.thread},
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
    // The one atomic writer: through symlinks, devices and FIFOs in place
    // (never renamed over or removed), temporary file + rename otherwise.
    if (ends_with(path, ".gz")) return detail::write_file_atomically(path, gzip(text), error);
    return detail::write_file_atomically(path, text, error);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace v1
}  // namespace stepscope
