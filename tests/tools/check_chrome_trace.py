#!/usr/bin/env python3
"""A second, independent consumer of stepscope's Chrome-trace export.

Usage: check_chrome_trace.py PROBE WORKDIR
Runs the probe with STEPSCOPE_TRACE=10-12 in WORKDIR, then loads the trace
with Python's own gzip + json modules (no third-party packages) and checks
what timeline viewers rely on. Exit 0 ok, 1 a check failed.
"""
import gzip
import json
import os
import subprocess
import sys


def main():
    probe, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "trace.json.gz")
    env = dict(os.environ, STEPSCOPE_QUIET="1", STEPSCOPE_TRACE="10-12", STEPSCOPE_TRACE_OUT=path,
               STEPSCOPE_OUT=os.path.join(workdir, "report.json"))
    subprocess.run([probe, "workload", "40"], cwd=workdir, env=env, check=True)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    complete = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    check(len(complete) > 0, f"{len(complete)} complete events")
    check(all(isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0 for e in complete),
          "every X event has numeric ts and dur >= 0")
    ts = [e["ts"] for e in complete]
    check(ts == sorted(ts), "X events sorted by ts")
    processes = {e["pid"] for e in meta if e["name"] == "process_name" and e["args"]["name"]}
    threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name" and e["args"]["name"]}
    check({e["pid"] for e in complete} <= processes, "process_name metadata for every process")
    check({(e["pid"], e["tid"]) for e in complete} <= threads, "thread_name metadata for every thread")
    steps = sorted(e["name"] for e in complete if e.get("cat") == "step")
    check(steps == ["step 10", "step 11", "step 12"], f"steps 10-12 marked: {steps}")
    # Every phase of a step lies inside it (same thread).
    step_spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in complete if e.get("cat") == "step"]
    inside = all(any(t == e["tid"] and s - 0.002 <= e["ts"] and e["ts"] + e["dur"] <= end + 0.002 for t, s, end in step_spans)
                 for e in complete if e.get("cat") != "step" and e["args"].get("step") in (10, 11, 12)
                 and any(t == e["tid"] for t, _, _ in step_spans))
    check(inside, "step-thread phases of steps 10-12 lie inside their step")
    names = {e["name"] for e in complete}
    check({"data", "forward", "matmul", "optimizer"} <= names, "the probe's phases are in the trace")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
