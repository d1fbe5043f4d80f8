// The HTML report in a real browser: headless Chromium loads the page from a
// file, with the network off. Its script must run without errors (the page's
// own window.onerror writes them into data-errors, and marks the end of its
// script with data-rendered="ok"), the sections must be in the DOM, and a
// screenshot must show a drawn page (several colours, not one flat fill).
//
// Not Catch2: exits 77 (CTest SKIP_RETURN_CODE) when Chromium is not
// installed, so CI without a browser reports "skipped", not "passed".
#include "tools/png_reader.hpp"
#include "tools/tool_runner.hpp"

#include <stepscope/html.hpp>
#include <stepscope/report.hpp>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace stepscope_test;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

std::string find_chromium() {
  for (const char* candidate : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    const std::string probe_cmd = std::string("command -v ") + candidate + " >/dev/null 2>&1";
    if (std::system(probe_cmd.c_str()) == 0) return candidate;
  }
  return "";
}

// Flags: no sandbox (containers), no GPU, and nothing that talks to the network.
std::string chromium_command(const std::string& browser, const TempDir& dir, const std::string& mode) {
  return browser +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
         "--disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir='" +
         (dir / "chromium-profile") + "' --enable-logging=stderr --v=0 " + mode;
}

std::string attribute(const std::string& dom, const std::string& name) {
  const auto at = dom.find(name + "=\"");
  if (at == std::string::npos) return "<absent>";
  const auto start = at + name.size() + 2;
  return dom.substr(start, dom.find('"', start) - start);
}

void check_page(const std::string& browser, const TempDir& dir, const std::string& page,
                const std::vector<std::string>& ids) {
  std::printf("-- %s\n", page.c_str());
  const std::string url = "file://" + (dir / page);
  const Result dom_run = run(dir, "timeout 90 " + chromium_command(browser, dir, "--dump-dom '" + url + "'"));
  check(dom_run.status == 0, "chromium --dump-dom exits 0 (status " + std::to_string(dom_run.status) + ")");
  const std::string& dom = dom_run.out;
  check(attribute(dom, "data-rendered") == "ok",
        "the page's script ran to its end: data-rendered=" + attribute(dom, "data-rendered"));
  check(attribute(dom, "data-errors") == "<absent>", "no script error: data-errors=" + attribute(dom, "data-errors"));
  for (const auto& id : ids)
    check(dom.find("id=\"" + id + "\"") != std::string::npos, "element #" + id + " is in the DOM");
  // Chromium logs blocked requests (CSP) and script errors to the console.
  for (const char* bad : {"Refused to", "Uncaught", "net::ERR_"})
    check(dom_run.err.find(bad) == std::string::npos, std::string("no '") + bad + "' in the browser log");

  const std::string png = dir / (page + ".png");
  const Result shot = run(
      dir, "timeout 90 " +
               chromium_command(browser, dir,
                                "--hide-scrollbars --window-size=1280,2000 --screenshot='" + png + "' '" + url + "'"));
  check(shot.status == 0 && exists(png), "chromium --screenshot wrote " + png);
  const std::string bytes = slurp(png);
  check(bytes.size() > 20000, "the screenshot is not trivially small (" + std::to_string(bytes.size()) + " bytes)");
  const Image img = decode_png(bytes);
  check(img.error.empty(), "the screenshot decodes: " + (img.error.empty() ? "yes" : img.error));
  if (!img.error.empty()) return;
  // STEPSCOPE_TEST_KEEP_DIR=/some/dir keeps the screenshots to look at.
  if (const char* keep = std::getenv("STEPSCOPE_TEST_KEEP_DIR"); keep != nullptr && *keep != '\0')
    std::system(("cp '" + png + "' '" + keep + "/'").c_str());
  check(img.width == 1280 && img.height == 2000, "1280x2000 pixels");
  // Count colours on a coarse grid and how much is not the background.
  std::map<std::uint32_t, std::size_t> colours;
  std::size_t samples = 0;
  for (std::uint32_t y = 0; y < img.height; y += 4)
    for (std::uint32_t x = 0; x < img.width; x += 4) {
      const std::size_t i = (static_cast<std::size_t>(y) * img.width + x) * 3;
      ++colours[(std::uint32_t{img.rgb[i]} << 16) | (std::uint32_t{img.rgb[i + 1]} << 8) | img.rgb[i + 2]];
      ++samples;
    }
  std::size_t most = 0;
  for (const auto& [colour, n] : colours) most = std::max(most, n);
  const double dominant = static_cast<double>(most) / static_cast<double>(samples);
  check(colours.size() >= 20, "many colours (" + std::to_string(colours.size()) + ")");
  check(dominant < 0.9,
        "not one flat fill (dominant colour " + std::to_string(static_cast<int>(dominant * 100)) + "%)");
  // The kind colours of the charts are on screen (input orange, compute blue).
  auto has_colour = [&](std::uint32_t rgb) { return colours.count(rgb) > 0; };
  check(has_colour(0x4e79a7), "the compute colour (#4e79a7) is drawn");
}

}  // namespace

int main() {
  const std::string browser = find_chromium();
  if (browser.empty()) {
    std::printf(
        "SKIPPED: Chromium not found (chromium, chromium-browser, google-chrome); scripts/install-deps --all installs "
        "it\n");
    return 77;
  }
  TempDir dir;
  // A live run of the probe.
  if (!make_probe_report(dir, "live.json", "", 200)) {
    std::printf("FAIL: the probe did not write a report\n");
    return 1;
  }
  const Result html = run(dir, tool() + " html live.json -o live.html");
  check(html.status == 0, "stepscope html live.json");
  check_page(browser, dir, "live.html",
             {"verdict", "steps", "breakdown-chart", "series", "series-chart", "phases", "phase-table", "what-if",
              "findings", "warnings", "dropped", "run", "config", "build"});

  // A real GPU trace, analysed, and a merged job when merge is built in.
  const std::string rank0 = shared_trace("sampled_128rank_rank0.json.gz"),
                    rank1 = shared_trace("sampled_128rank_rank1.json.gz");
  if (exists(rank0) && exists(rank1)) {
    const Result analyze = run(dir, tool() + " analyze -q '" + rank0 + "' --out-dir . --html trace.html");
    check(analyze.status == 0, "stepscope analyze " + rank0);
    check_page(browser, dir, "trace.html", {"verdict", "series-chart", "phase-table", "what-if", "device"});
    const Result merged = run(
        dir, tool() + " analyze -q --merge '" + rank0 + "' '" + rank1 + "' --out-dir . -o job.json --html job.html");
#if __has_include(<stepscope/merge.hpp>)
    check(merged.status == 0, "stepscope analyze --merge (two ranks): " + merged.err);
    if (merged.status == 0)
      check_page(browser, dir, "job.html", {"verdict", "ranks", "rank-summary", "rank-chart", "rank-table"});
#else
    std::printf("note: built without merge: no merged page (%s)\n", merged.err.c_str());
#endif
  } else {
    check(false, std::string("the traces in ") + STEPSCOPE_TEST_DATA_DIR + "/traces are missing");
  }
  std::printf("%s: %d failure(s)\n", failures == 0 ? "PASSED" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
