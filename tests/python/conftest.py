"""Shared helpers of the Python tests (run by ctest: tests/python/CMakeLists.txt
sets PYTHONPATH to the built package and STEPSCOPE_CLI to the command-line tool).

Processes: a stepscope run is one per process, so the loops whose report is
checked run in their own process (tests/python/loops.py), with their report
in a temporary folder. A run starved of CPU by other load (its step thread
runnable but waiting >= 25% of the run, as tests/scenarios judges it) is
tried again, up to 3 times, then the test is skipped with the reason —
never passed and never weakened.
"""

import json
import os
import subprocess
import sys

import pytest

# This process records too (the in-process API tests): every step counts, no
# summary on stderr, and the report at exit goes nowhere. Read at the first
# scope, so set before any test runs.
os.environ["STEPSCOPE_WARMUP"] = "0"
os.environ["STEPSCOPE_QUIET"] = "1"
os.environ["STEPSCOPE_OUT"] = "/dev/null"

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPS = os.path.join(HERE, "loops.py")

STARVED_RUNQUEUE_FRACTION = 0.25
ATTEMPTS = 3


def runqueue_fraction(report):
    system = report.get("system", {})
    wall = system.get("wall_s", 0) or 0
    return (system.get("runqueue_wait_s", 0) or 0) / wall if wall > 0 else 0.0


def starved(report):
    return runqueue_fraction(report) >= STARVED_RUNQUEUE_FRACTION


def run_loop(tmp_path, name, *args, env=None, check=True):
    """Runs loops.py with `args`; returns (report dict or None, stdout)."""
    out = tmp_path / (name + ".json")
    environment = dict(os.environ)
    environment.pop("STEPSCOPE_WARMUP", None)  # the loops keep the default warm-up (DataLoader start-up)
    environment.update({"STEPSCOPE_QUIET": "1", "STEPSCOPE_OUT": str(out), "TMPDIR": str(tmp_path)})
    environment.update(env or {})
    proc = subprocess.run(
        [sys.executable, LOOPS, *args], env=environment, capture_output=True, text=True, timeout=300
    )
    if check:
        assert proc.returncode == 0, "loops.py %s failed (%d):\n%s" % (" ".join(args), proc.returncode, proc.stderr)
    report = json.loads(out.read_text()) if out.exists() else None
    if report is not None:
        report["_path"] = str(out)  # where it was read from (not a report field)
    return report, proc.stdout, proc


def run_until(tmp_path, name, args, holds, env=None):
    """Runs a loop until `holds(report)` or a run was not starved; skips when
    every attempt was starved."""
    report = None
    for attempt in range(ATTEMPTS):
        report, _, _ = run_loop(tmp_path, "%s.%d" % (name, attempt), *args, env=env)
        if holds(report) or not starved(report):
            return report
    pytest.skip(
        "%s: in all %d attempts the step thread waited for a CPU >= %.0f%% of the run (last %.0f%%); "
        "the machine did not run this loop as built" % (name, ATTEMPTS, 100 * STARVED_RUNQUEUE_FRACTION,
                                                        100 * runqueue_fraction(report))
    )


def phases(report, name=None):
    return [p for p in report["phases"] if name is None or p["name"] == name]


def step_phase(report, name):
    """The step-thread row of a phase (role "step")."""
    rows = [p for p in report["phases"] if p["name"] == name and p["thread_role"] == "step"]
    assert len(rows) == 1, "phase %s: %s" % (name, rows)
    return rows[0]


def cli():
    path = os.environ.get("STEPSCOPE_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("STEPSCOPE_CLI (the stepscope command-line tool) is not set; ctest sets it")
    return path
