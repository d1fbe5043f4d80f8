"""The stepscope module's API: phases (with, kind=, decorator, nesting, threads),
step() and next_step(), set_config, snapshot(), bad input; and, in their own
processes, the report contract: finish() returns the report's path, the report
is the C++ run time's (same schema, read by the CLI), a phase after finish()
warns and records nothing, and without finish() the report is written at exit."""

import json
import os
import subprocess
import threading

import pytest

import stepscope
from conftest import cli, run_loop


def counts():
    """(phase name, kind, role) -> count, and the steps so far (warm-up is 0)."""
    report = stepscope.snapshot()
    table = {}
    for p in report["phases"]:
        key = (p["name"], p["kind"], p["thread_role"])
        table[key] = table.get(key, 0) + p["count"]
    return table, report["steps"]["count"]


def delta(before, after):
    keys = set(before[0]) | set(after[0])
    return {k: after[0].get(k, 0) - before[0].get(k, 0) for k in keys if after[0].get(k, 0) != before[0].get(k, 0)}, (
        after[1] - before[1]
    )


def test_phase_with_kind_and_decorator_are_recorded_under_their_names():
    @stepscope.phase("api.decorated")
    def work(x):
        """doc"""
        return x + 1

    before = counts()
    with stepscope.step():
        with stepscope.phase("api.load"):
            pass
        with stepscope.phase("api.copy", kind="memory"):
            pass
        assert work(1) == 2
        assert work(2) == 3
    changed, steps = delta(before, counts())
    assert steps == 1
    assert changed == {
        ("api.load", "other", "step"): 1,
        ("api.copy", "memory", "step"): 1,
        ("api.decorated", "other", "step"): 2,
    }
    assert work.__name__ == "work" and work.__doc__ == "doc"  # functools.wraps
    assert stepscope._core.thread_depth() == 0


def test_kind_comes_from_the_name_as_in_cpp():
    assert stepscope.phase("data").kind == "input"
    assert stepscope.phase("forward").kind == "compute"
    assert stepscope.phase("h2d").kind == "memory"
    assert stepscope.phase("allreduce").kind == "communication"
    assert stepscope.phase("api.anything").kind == "other"
    assert stepscope.phase("api.anything", kind="compute").kind == "compute"
    # One native object per (name, kind): a with costs no allocation.
    assert stepscope.phase("api.same") is stepscope.phase("api.same")


def test_nested_and_recursive_uses_of_one_phase_each_count():
    p = stepscope.phase("api.nested")

    @stepscope.phase("api.recursive")
    def recurse(n):
        return 0 if n == 0 else 1 + recurse(n - 1)

    before = counts()
    with stepscope.step():
        with p:
            with p:
                with p:
                    pass
        assert recurse(9) == 9  # 10 open at once: past the object's inline slots
    changed, _ = delta(before, counts())
    assert changed[("api.nested", "other", "step")] == 3
    assert changed[("api.recursive", "other", "step")] == 10
    assert p.open_scopes == 0
    assert stepscope._core.thread_depth() == 0


def test_an_exception_in_the_block_closes_the_phase_and_propagates():
    before = counts()
    with pytest.raises(KeyError):
        with stepscope.step():
            with stepscope.phase("api.raises"):
                raise KeyError("x")
    changed, steps = delta(before, counts())
    assert steps == 1
    assert changed[("api.raises", "other", "step")] == 1
    assert stepscope._core.thread_depth() == 0


def test_threads_share_a_phase_object_and_each_closes_its_own():
    p = stepscope.phase("api.threads")
    barrier = threading.Barrier(4)

    def worker():
        for _ in range(50):
            with p:
                barrier.wait() if _ == 0 else None
        assert stepscope._core.thread_depth() == 0

    before = counts()
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    changed, _ = delta(before, counts())
    # Threads that never run steps: background phases.
    assert changed[("api.threads", "other", "background")] == 200
    assert p.open_scopes == 0


def test_next_step_ends_the_step_it_opened_and_opens_the_next():
    def body():
        before = counts()
        for _ in range(5):
            stepscope.next_step()
            with stepscope.phase("api.marked"):
                pass
        mid = delta(before, counts())
        stepscope.next_step()  # closes the fifth
        return mid, delta(before, counts())

    # On its own thread: its last step stays open until the next call (the
    # thread's exit would close it too).
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", body()))
    t.start()
    t.join()
    (changed_mid, steps_mid), (changed, steps) = result["r"]
    assert steps_mid == 4  # the fifth is still open
    assert steps == 5  # five closed; the sixth, just opened, is still open
    assert changed[("api.marked", "other", "step")] == 5


def test_set_config_values_reach_run_config():
    stepscope.set_config("api.batch_size", 64)
    stepscope.set_config("api.lr", 0.5)
    stepscope.set_config("api.precision", "bf16")
    stepscope.set_config("api.compiled", True)
    run = stepscope.snapshot()["run"]
    assert run["config"]["api.batch_size"] == 64  # numbers stay numbers
    assert run["config"]["api.lr"] == 0.5
    assert run["config"]["api.precision"] == "bf16"
    assert run["config"]["api.compiled"] == "true"


def test_snapshot_is_the_report_structure():
    report = stepscope.snapshot()
    for key in ("schema_version", "run", "steps", "phases", "bottleneck", "system", "runtime_sites", "warnings"):
        assert key in report
    assert report["run"]["source"] == "live"
    assert report["runtime_sites"]["sites"] >= 1


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: stepscope.phase(3), TypeError),
        (lambda: stepscope.phase(None), TypeError),
        (lambda: stepscope.phase(["a"]), TypeError),
        (lambda: stepscope.phase(""), ValueError),
        (lambda: stepscope.phase("x", kind=1), TypeError),
        (lambda: stepscope.phase("x", kind="gpu"), ValueError),
        (lambda: stepscope.phase("x")(42), TypeError),
        (lambda: stepscope.set_config(1, 2), TypeError),
        (lambda: stepscope.set_config("k", None), TypeError),
        (lambda: stepscope.set_config("k", [1]), TypeError),
        (lambda: stepscope.set_config("", 1), ValueError),
        (lambda: list(stepscope.steps(5)), TypeError),
        (lambda: stepscope.set_rank(2, 2), ValueError),
        (lambda: stepscope.set_rank(-1, 4), ValueError),
        (lambda: stepscope.set_rank(0, 0), ValueError),
        (lambda: stepscope.set_rank("a", 2), TypeError),
    ],
)
def test_bad_input_raises_a_clear_python_exception(call, error):
    with pytest.raises(error) as info:
        call()
    assert "stepscope" in str(info.value) or error is TypeError
    assert stepscope._core.thread_depth() == 0


def test_exit_without_enter_is_harmless():
    p = stepscope.phase("api.unbalanced")
    assert p.__exit__(None, None, None) is False
    assert stepscope._core.thread_depth() == 0


def test_finish_returns_the_report_path_and_the_cli_reads_it(tmp_path):
    report, stdout, _ = run_loop(
        tmp_path, "contract", "contract", env={"STEPSCOPE_WARMUP": "0", "MALLOC_TOP_PAD_": "33554432"}
    )
    import json

    seen = json.loads(stdout)
    assert seen["finish"] == str(tmp_path / "contract.json")
    assert seen["finish_again"] == seen["finish"]  # idempotent
    assert seen["enabled_after"] is False
    # Phases, steps and next_step after finish(): recorded nowhere, each warned about.
    assert any("finish() was called" in w and "'forward'" in w for w in seen["warnings"])
    assert any("'step'" in w for w in seen["warnings"])
    assert any("next_step()" in w for w in seen["warnings"])
    assert any("steps() loop" in w for w in seen["warnings"])
    assert seen["depth_after"] == 0
    assert report["complete"] is True and report["ended_by"] == "finish"
    assert report["steps"]["count"] == 12
    counts_by_name = {(p["name"], p["thread_role"]): p["count"] for p in report["phases"]}
    assert counts_by_name[("forward", "step")] == 12
    assert counts_by_name[("h2d", "step")] == 12
    assert counts_by_name[("data", "step")] == 12
    assert report["run"]["config"]["precision"] == "fp32"
    # The environment's allocator settings, as `stepscope diff` names them.
    assert report["run"]["config"]["env:glibc_malloc"] == "MALLOC_TOP_PAD_=33554432"
    shown = subprocess.run([cli(), "show", seen["finish"]], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "forward" in shown.stdout and "h2d" in shown.stdout


def test_without_finish_the_report_is_written_at_exit(tmp_path):
    report, _, _ = run_loop(tmp_path, "at-exit", "at-exit", env={"STEPSCOPE_WARMUP": "0"})
    assert report is not None
    assert report["complete"] is True and report["ended_by"] == "exit"
    assert report["steps"]["count"] == 7


def test_next_step_last_step_and_python_wording(tmp_path):
    # The last next_step() step is closed by the exit, 0.3 s after the loop:
    # left out and counted, so no step holds the sleep.
    report, _, _ = run_loop(tmp_path, "tail", "next-step-tail", env={"STEPSCOPE_WARMUP": "0"})
    assert report is not None
    steps = report["steps"]
    assert steps["count"] == 29
    assert steps["unended_excluded"] == 1
    assert steps["unended_wall_ms"] >= 300
    assert steps["wall_ms"]["max"] < 300
    # A run the package drove says so, and its advice names the package's calls.
    assert report["run"]["build"]["frontend"] == "python"
    texts = [report["bottleneck"]["summary"], *report["bottleneck"]["recommendations"]]
    texts += [f["message"] for f in report["findings"]]
    assert not any("STEPSCOPE_PHASE" in t or "stepscope::" in t for t in texts), texts
    assert any("stepscope.phase" in t for t in texts), texts


def test_ctrl_c_leaves_the_report_and_says_so(tmp_path):
    """An uncaught KeyboardInterrupt ends Python by re-raising SIGINT after its
    atexit hooks, so the native exit handler never ran: Ctrl-C on a Python run
    lost the report and the summary without a word. Python's exit status
    (killed by SIGINT) is kept."""
    import signal
    import sys

    out = tmp_path / "r.json"
    script = (
        "import stepscope\n"
        "for i in stepscope.steps(range(1000000)):\n"
        "    with stepscope.phase('forward'):\n"
        "        if i == 30: raise KeyboardInterrupt\n"
    )
    env = dict(os.environ, STEPSCOPE_OUT=str(out), STEPSCOPE_QUIET="0", STEPSCOPE_WARMUP="5")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGINT, proc.stderr
    assert "KeyboardInterrupt" in proc.stderr
    assert "run ended by SIGINT (Ctrl-C)" in proc.stderr, proc.stderr
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["ended_by"] == "SIGINT"
    assert report["exception"] is None  # Ctrl-C is an ending of its own, not an exception
    assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 31


def _run_script(tmp_path, script, *args, extra_env=None):
    import sys

    out = tmp_path / "r.json"
    if out.exists():
        out.unlink()
    env = dict(os.environ, STEPSCOPE_OUT=str(out), STEPSCOPE_QUIET="0", STEPSCOPE_WARMUP="5", **(extra_env or {}))
    proc = subprocess.run(
        [sys.executable, *args, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_an_uncaught_exception_is_in_the_report_and_its_summary(tmp_path):
    """A script that dies of an exception (a CUDA out-of-memory, a bad batch)
    still exits through Python's exit hooks: its report said ended_by "exit"
    and read as a whole run. Now the exception Python printed is in the report
    (qualified type, first line of the message) and the summary says so."""
    script = (
        "import stepscope, time\n"
        "class BadBatch(ValueError): pass\n"
        "for i in stepscope.steps(range(1000000)):\n"
        "    with stepscope.phase('forward'):\n"
        "        time.sleep(0.001)\n"
        "        if i == 40: raise BadBatch('batch 40 has NaN labels\\nsecond line')\n"
    )
    proc, report = _run_script(tmp_path, script)
    assert proc.returncode == 1, proc.stderr
    assert "BadBatch: batch 40 has NaN labels" in proc.stderr  # Python's own traceback, unchanged
    assert report["complete"] is True and report["ended_by"] == "exit"
    assert report["exception"]["type"] == "__main__.BadBatch", report["exception"]
    assert report["exception"]["message"] == "batch 40 has NaN labels"
    assert report["exception"]["after_s"] >= 0.04  # 40 steps of at least 1 ms before it
    assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 41  # the 41st ended by the raise
    assert (
        "run ended by an uncaught exception" in proc.stderr
        and "(__main__.BadBatch: batch 40 has NaN labels)" in proc.stderr
    ), proc.stderr


def test_a_builtin_exception_is_named_as_python_names_it(tmp_path):
    script = (
        "import stepscope\n"
        "for i in stepscope.steps(range(20)):\n"
        "    with stepscope.phase('forward'): pass\n"
        "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
    )
    proc, report = _run_script(tmp_path, script)
    assert proc.returncode == 1, proc.stderr
    assert report["exception"]["type"] == "RuntimeError"
    assert report["exception"]["message"] == "CUDA out of memory. Tried to allocate 2.00 GiB"


def test_an_exception_that_cannot_be_printed_still_leaves_the_report(tmp_path):
    """A __str__ that raises, a message with a lone surrogate (a file name
    decoded with surrogateescape): the exit hook must still write the report."""
    loop = "import stepscope\nfor i in stepscope.steps(range(20)):\n    with stepscope.phase('forward'): pass\n"
    proc, report = _run_script(
        tmp_path, loop + "class Odd(Exception):\n    def __str__(self): raise ValueError('no')\nraise Odd()\n"
    )
    assert proc.returncode == 1 and report is not None, proc.stderr
    assert report["exception"] == {"type": "__main__.Odd", "message": "", "after_s": report["exception"]["after_s"]}
    proc, report = _run_script(tmp_path, loop + "raise OSError('cannot open ' + b'caf\\xe9.bin'.decode('utf-8', 'surrogateescape'))\n")
    assert proc.returncode == 1 and report is not None, proc.stderr
    assert report["exception"]["type"] == "OSError"
    assert report["exception"]["message"] == "cannot open caf\\udce9.bin", report["exception"]


def test_caught_exceptions_sys_exit_and_interactive_sessions_are_not_uncaught(tmp_path):
    """Only the exception that ended the program counts: one the program
    caught, a sys.exit(), and the last exception an interactive session
    printed and went on from are not it."""
    loop = "import stepscope\nfor i in stepscope.steps(range(20)):\n    with stepscope.phase('forward'): pass\n"
    proc, report = _run_script(tmp_path, loop + "try:\n    raise RuntimeError('x')\nexcept RuntimeError:\n    pass\n")
    assert proc.returncode == 0, proc.stderr
    assert report["exception"] is None and "uncaught exception" not in proc.stderr
    proc, report = _run_script(tmp_path, loop + "import sys\nsys.exit(3)\n")
    assert proc.returncode == 3, proc.stderr
    assert report["exception"] is None
    # python -i: the REPL (reading an empty stdin) prints the exception and goes on.
    proc, report = _run_script(tmp_path, loop + "raise RuntimeError('seen at the prompt')\n", "-i")
    assert "seen at the prompt" in proc.stderr
    assert report["exception"] is None, report["exception"]


def test_a_crash_in_native_code_still_writes_the_final_report(tmp_path):
    """A segmentation fault in an extension (here ctypes reading address 0)
    used to leave the last snapshot at best. The crashing thread now asks the
    collector for the final report, then the crash goes on as without
    stepscope (killed by SIGSEGV). With faulthandler on (python -X
    faulthandler, pytest), SIGSEGV is faulthandler's and is left alone."""
    import signal

    script = (
        "import ctypes, stepscope, time\n"
        "for i in stepscope.steps(range(1000000)):\n"
        "    with stepscope.phase('forward'):\n"
        "        time.sleep(0.001)\n"
        "        if i == 30: ctypes.string_at(0)\n"
    )
    env = {"PYTHONFAULTHANDLER": ""}
    proc, report = _run_script(tmp_path, script, extra_env=env)
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert report is not None and report["complete"] is True and report["ended_by"] == "SIGSEGV"
    assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 30  # the 31st never ended
    assert "run ended by SIGSEGV (a crash: invalid memory access)" in proc.stderr, proc.stderr
    proc, report = _run_script(tmp_path, script, "-X", "faulthandler", extra_env=env)
    assert proc.returncode == -signal.SIGSEGV and "Fatal Python error: Segmentation fault" in proc.stderr
    assert report is None or report["complete"] is False


def test_a_forked_worker_that_is_terminated_or_crashes_dies_at_once(tmp_path):
    """multiprocessing's Pool.terminate()/Process.terminate() send SIGTERM to
    forked workers, which have no collector thread: stepscope's inherited
    handler waited its whole 5 s report budget in each before letting it die
    (and so would a worker's abort()). The bound asserted is half that budget,
    not a speed: a kill and a join take milliseconds even on a busy machine."""
    script = (
        "import multiprocessing as mp, os, time, stepscope\n"
        "mp.set_start_method('fork')\n"
        "for i in stepscope.steps(range(20)):\n"
        "    with stepscope.phase('forward'): time.sleep(0.001)\n"
        "p = mp.Process(target=time.sleep, args=(60,)); p.start(); time.sleep(0.3)\n"
        "t = time.monotonic(); p.terminate(); p.join(); took = time.monotonic() - t\n"
        "assert p.exitcode == -15 and took < 2.5, (p.exitcode, took)\n"
        "p = mp.Process(target=os.abort); t = time.monotonic(); p.start(); p.join(); took = time.monotonic() - t\n"
        "assert p.exitcode == -6 and took < 2.5, (p.exitcode, took)\n"
        "print('ok')\n"
    )
    proc, report = _run_script(tmp_path, script)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert report["complete"] is True and report["ended_by"] == "exit"  # the parent's report, untouched


def _without_inherited_sigint_ignore():
    # A shell's background job (CI) starts with SIGINT ignored, and Python
    # then installs no handler of its own: the child gets the default back.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_caught_ctrl_c_is_reported_as_an_interruption(tmp_path):
    """A Ctrl-C that the program catches (a script saving a checkpoint, a
    library shutting down 'gracefully') used to leave a report that read as a
    whole run: ended_by "exit" and nothing else. A real SIGINT is sent; Python
    still raises KeyboardInterrupt from its own handler, signal.getsignal() is
    unchanged, and a handler the program installs afterwards still works."""
    import signal
    import sys

    out = tmp_path / "r.json"
    script = (
        "import os, signal, threading, stepscope\n"
        "stepscope.enabled(); stepscope.snapshot()  # starts the collector and waits for it: its handlers are in place\n"
        "caught = 0\n"
        "for i in stepscope.steps(range(60)):\n"
        "    with stepscope.phase('forward'):\n"
        "        try:\n"
        "            if i == 30:\n"
        "                os.kill(os.getpid(), signal.SIGINT)\n"
        "                signal.pthread_kill(threading.get_ident(), 0)  # a point where Python runs its handler\n"
        "        except KeyboardInterrupt:\n"
        "            caught += 1\n"
        "assert caught == 1, caught\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "seen = []\n"
        "signal.signal(signal.SIGINT, lambda s, f: seen.append(s))\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "signal.pthread_kill(threading.get_ident(), 0)\n"
        "assert seen == [signal.SIGINT], seen\n"
        "print('ok')\n"
    )
    env = dict(os.environ, STEPSCOPE_OUT=str(out), STEPSCOPE_QUIET="0", STEPSCOPE_WARMUP="5")
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_without_inherited_sigint_ignore,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["ended_by"] == "exit"
    assert report["interrupted"]["signal"] == "SIGINT", report["interrupted"]
    assert report["interrupted"]["after_s"] > 0
    assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 60
    assert "run interrupted by SIGINT (Ctrl-C)" in proc.stderr, proc.stderr
    assert "ended by its normal exit" in proc.stderr


def test_a_run_without_signals_reports_no_interruption(tmp_path):
    report, _, _ = run_loop(tmp_path, "at-exit", "at-exit", env={"STEPSCOPE_WARMUP": "0"})
    assert report["ended_by"] == "exit" and report["interrupted"] is None


def test_a_process_that_records_nothing_leaves_an_existing_report_alone(tmp_path):
    """`import stepscope` (and starting it) in a process that records nothing
    replaced the user's stepscope-report.json with an empty 0-step report, and
    its summary claimed "281.69% of one core" for the collector."""
    import sys

    existing = tmp_path / "stepscope-report.json"
    existing.write_text('{"the user\'s": "report"}\n')
    env = dict(os.environ, STEPSCOPE_QUIET="0")
    env.pop("STEPSCOPE_OUT", None)
    for script in ("import stepscope", "import stepscope\nstepscope.enabled()\nstepscope.phase('never')"):
        proc = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert existing.read_text() == '{"the user\'s": "report"}\n'
        assert "of one core" not in proc.stderr


def test_report_to_stdout_appends_after_what_the_program_printed(tmp_path):
    """STEPSCOPE_OUT=/dev/stdout with `>> train.log 2>&1`: the log was
    reopened with O_TRUNC (yesterday's lines lost) and the summary landed inside
    the JSON. Now the report is appended at the descriptor's offset, after what
    the program printed, and the summary follows it."""
    import sys

    log = tmp_path / "train.log"
    log.write_text("yesterday\n")
    script = (
        "import time, stepscope\n"
        "print('hello from the program')\n"
        "for i in stepscope.steps(range(12)):\n"
        "    with stepscope.phase('forward'): time.sleep(0.001)\n"
    )
    env = dict(os.environ, STEPSCOPE_OUT="/dev/stdout", STEPSCOPE_QUIET="0", STEPSCOPE_WARMUP="2")
    with open(log, "a") as out:
        proc = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=120
        )
    text = log.read_text()
    assert proc.returncode == 0, text
    assert text.startswith("yesterday\nhello from the program\n{"), text[:200]
    body = text[len("yesterday\nhello from the program\n") :]
    end = body.index("\n}\n") + 3
    report = json.loads(body[:end])
    assert report["complete"] is True and report["steps"]["count"] == 10
    assert "== stepscope" in body[end:]


def test_dataloader_workers_with_children_write_complete_reports(tmp_path):
    """STEPSCOPE_CHILDREN=1 and DataLoader workers: a worker ends with
    os._exit(), so it left at best a snapshot (complete: false) with every
    phase count 0 (a worker runs no step of its own and never left warm-up).
    Each worker now writes its final report from multiprocessing's exit step,
    with its phases counted."""
    import sys

    pytest.importorskip("torch")
    script = (
        "import time, stepscope, torch\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "class Samples(Dataset):\n"
        "    def __len__(self): return 32\n"
        "    def __getitem__(self, i):\n"
        "        with stepscope.phase('load'): time.sleep(0.001)\n"
        "        return torch.zeros(4)\n"
        "for batch in stepscope.steps(DataLoader(Samples(), batch_size=4, num_workers=2)):\n"
        "    with stepscope.phase('forward'): time.sleep(0.001)\n"
    )
    env = dict(os.environ, STEPSCOPE_CHILDREN="1", STEPSCOPE_QUIET="1")
    env.pop("STEPSCOPE_OUT", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    workers = sorted(tmp_path.glob("stepscope-report.pid*.json"))
    assert len(workers) == 2, list(tmp_path.iterdir())
    loads = 0
    for path in workers:
        report = json.loads(path.read_text())
        assert report["complete"] is True and report["ended_by"] == "exit", path
        loads += sum(p["count"] for p in report["phases"] if p["name"] == "load")
    assert loads == 32  # every sample, none left in a warm-up
    parent = json.loads((tmp_path / "stepscope-report.json").read_text())
    assert parent["steps"]["count"] + parent["steps"]["warmup_excluded"] == 8
