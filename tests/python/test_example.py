"""examples/python/seed_step.py runs (so the README's demo cannot drift): both
tables print, and its stepscope report has the tutorial's phases, the fetch
as each step's data phase."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "seed_step.py")


def test_seed_step_prints_both_timings_and_writes_the_report(tmp_path):
    env = dict(os.environ, STEPSCOPE_OUT=str(tmp_path / "seed.json"), STEPSCOPE_QUIET="1", TMPDIR=str(tmp_path))
    env.pop("STEPSCOPE_WARMUP", None)
    proc = subprocess.run(
        [sys.executable, EXAMPLE, "--steps", "12", "--decode-passes", "1", "--batch-size", "8"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "time.time() ms" in proc.stdout and "stepscope ms" in proc.stdout
    assert "stepscope:" in proc.stdout  # the verdict line
    report = json.loads((tmp_path / "seed.json").read_text())
    assert report["ended_by"] == "finish"
    rows = {p["name"]: p for p in report["phases"] if p["thread_role"] == "step"}
    for name in ("data", "h2d", "forward", "backward", "optimizer"):
        assert name in rows, name
    # The loop's `if batch_idx >= steps: break` leaves one more step that did
    # nothing after its fetch: counted apart, its fetch in the table.
    steps = report["steps"]
    assert steps["unended_excluded"] == 1
    assert rows["data"]["count"] == steps["count"] + 1
    assert report["run"]["config"]["num_workers"] == 0
