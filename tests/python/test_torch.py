"""stepscope.torch on real torch CPU training loops (tests/python/loops.py,
each run in its own process): instrument() records the phases a
hand-instrumented loop records, with the same times within noise; the
verdicts — a compute-bound MLP is compute, a slow Dataset read in the step
(0 workers) is io, the same with 4 workers is not io — and `stepscope diff`
of the last two shows the step and its data phase faster, with the
num_workers change named. No absolute wall-clock values are asserted; a run
starved of CPU is retried, then skipped with the reason (conftest.py)."""

import json
import math
import subprocess
import threading

import pytest

import stepscope
import stepscope.torch
from conftest import cli, run_loop, run_until, starved, step_phase

torch = pytest.importorskip("torch")


def category(report):
    return report["bottleneck"]["category"]


def test_compute_bound_mlp_is_compute(tmp_path):
    report = run_until(tmp_path, "compute", ["compute"], lambda r: category(r) == "compute")
    assert category(report) == "compute", report["bottleneck"]
    for name in ("forward", "backward", "optimizer", "data"):
        assert step_phase(report, name)["count"] == report["steps"]["count"]


def test_slow_dataset_in_the_step_is_io(tmp_path):
    report = run_until(tmp_path, "io0", ["slow-data", "0"], lambda r: category(r) == "io")
    assert category(report) == "io", report["bottleneck"]
    assert report["run"]["config"]["num_workers"] == 0


def test_workers_take_the_slow_dataset_off_the_step_and_diff_shows_the_gain(tmp_path):
    def faster(diff):
        return diff["step"]["verdict"] == "faster"

    for attempt in range(3):
        base = run_until(tmp_path, "w0.%d" % attempt, ["slow-data", "0"], lambda r: category(r) == "io")
        new = run_until(tmp_path, "w4.%d" % attempt, ["slow-data", "4"], lambda r: category(r) != "io")
        proc = subprocess.run([cli(), "diff", base["_path"], new["_path"], "--json"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        diff = json.loads(proc.stdout)
        if faster(diff) or not (starved(base) or starved(new) or diff["conditions"]["differ"]):
            break
    else:
        pytest.skip("the machine's load kept changing between the two runs in 3 attempts: %s" % diff["conditions"])
    assert category(new) != "io", new["bottleneck"]
    assert new["run"]["config"]["num_workers"] == 4
    assert "num_workers: 0 -> 4" in diff["config_changes"]
    assert len(diff["config_changes"]) == 1, diff["config_changes"]  # one variable changed, one named
    assert diff["step"]["verdict"] == "faster", diff["step"]
    # The setting that changed is the answer, not the machine: the 4 workers'
    # own context switches are its consequence (issue 32).
    assert "config num_workers: 0 -> 4" in diff["explained_by"], diff
    assert not any("likely the machine's" in w for w in diff["warnings"]), diff["warnings"]
    assert new["run"]["config"]["prefetch_factor"] == base["run"]["config"]["prefetch_factor"] == 2
    data = [p for p in diff["phases"] if p["name"] == "data" and p["base_role"] == "step"]
    assert len(data) == 1 and data[0]["verdict"] == "faster", data


def test_each_epoch_restarting_the_loader_workers_is_named_with_persistent_workers(tmp_path):
    # 3 epochs, 2 workers: without persistent_workers the first step of
    # epochs 2 and 3 waits for new worker processes (tens of ms against a
    # step of about a millisecond).
    report, _, _ = run_loop(tmp_path, "epochs0", "epochs", "0")
    steps = report["steps"]
    assert steps["loop_first_steps"] == 2, steps
    findings = {f["kind"]: f for f in report["findings"]}
    assert "loop_restart" in findings, [f["kind"] for f in report["findings"]]
    restart = findings["loop_restart"]
    assert restart["values"]["over_rest"] >= 2, restart  # against the rest of its own epoch
    assert "persistent_workers=True" in restart["message"]
    assert report["run"]["config"]["persistent_workers"] == "false"  # recorded by stepscope.torch.steps()
    assert report["run"]["config"]["optimizer"] == "SGD"  # recorded by instrument()


def test_a_checkpoint_every_n_steps_is_named_with_its_period(tmp_path):
    # 300 steps of a few ms; every 25th also saves a checkpoint (+40 ms) with
    # no phase around it: the jitter finding alone would say "look for
    # periodic work"; this one says which steps, how much, and where.
    report, _, _ = run_loop(tmp_path, "checkpoint", "checkpoint", "25", str(tmp_path / "ckpt.pt"))
    findings = {f["kind"]: f for f in report["findings"]}
    assert "periodic_slow_steps" in findings, [f["message"] for f in report["findings"]]
    periodic = findings["periodic_slow_steps"]
    assert periodic["values"]["period_steps"] == 25, periodic
    assert periodic["values"]["slow_steps"] >= 8, periodic  # 11 checkpoints after the warm-up
    assert "outside every phase" in periodic["message"], periodic
    assert 'stepscope.phase("...")' in periodic["message"], periodic  # worded for Python
    slowest = report["steps"]["slowest"]
    assert len(slowest) == 32
    assert all(a["wall_ms"] >= b["wall_ms"] for a, b in zip(slowest, slowest[1:]))


def test_instrument_records_what_a_hand_instrumented_loop_records(tmp_path):
    """Epochs alternate between instrument() and the same phases by hand in
    one process; counts are equal and the means agree within noise."""

    def agree(r):
        return all(close(r, name) for name in ("forward", "backward", "optimizer"))

    def close(r, name):
        a, b = step_phase(r, name)["host_ms"], step_phase(r, "hand." + name)["host_ms"]
        # Noise: 4 standard errors of the difference, plus 25% of the smaller
        # mean for what a busy machine does to one epoch and not the next.
        se = math.sqrt(a["stddev"] ** 2 / a["count"] + b["stddev"] ** 2 / b["count"])
        return abs(a["mean"] - b["mean"]) <= 4 * se + 0.25 * min(a["mean"], b["mean"])

    report = run_until(tmp_path, "compare", ["compare"], agree)
    for name in ("forward", "backward", "optimizer"):
        auto, hand = step_phase(report, name), step_phase(report, "hand." + name)
        # 8 epochs of 20 batches, 4 each way; the warm-up (5 steps) is in the first, instrumented one.
        assert hand["count"] == 80
        assert auto["count"] == 80 - 5
        assert close(report, name), (name, auto["host_ms"], hand["host_ms"])
    assert step_phase(report, "data")["count"] == report["steps"]["count"]


def _small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _counts():
    return {(p["name"], p["thread_role"]): p["count"] for p in stepscope.snapshot()["phases"]}


def test_instrument_in_process_counts_submodules_and_remove_restores():
    model, x = _small_model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = _counts()
    handle = stepscope.torch.instrument(model, optimizer, submodules=True)
    with stepscope.step():
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
    after = _counts()
    for name in ("forward", "forward.0", "forward.1", "forward.2", "backward", "optimizer"):
        assert after.get((name, "step"), 0) - before.get((name, "step"), 0) == 1, name
    handle.remove()
    assert "forward" not in vars(model) and "step" not in vars(optimizer)
    assert torch.autograd.backward.__name__ == "backward"
    with stepscope.step():
        model(x).sum().backward()
        optimizer.step()
    later = _counts()
    for name in ("forward", "forward.0", "backward", "optimizer"):
        assert later.get((name, "step"), 0) == after.get((name, "step"), 0), name
    assert stepscope._core.thread_depth() == 0


def test_a_forward_with_gradients_off_is_its_own_phase():
    # pytorch/examples' gat evaluates twice inside every training step: as
    # 'forward' the evaluation read as the training forward.
    model, x = _small_model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = _counts()
    handle = stepscope.torch.instrument(model, optimizer)
    try:
        with stepscope.step():
            model(x).sum().backward()
            optimizer.step()
            with torch.no_grad():
                model(x)
            with torch.inference_mode():
                model(x)
    finally:
        handle.remove()
    after = _counts()
    names = ("forward", "forward_no_grad", "backward")
    grown = {name: after.get((name, "step"), 0) - before.get((name, "step"), 0) for name in names}
    assert grown == {"forward": 1, "forward_no_grad": 2, "backward": 1}, grown
    kinds = {p["name"]: p["kind"] for p in stepscope.snapshot()["phases"]}
    assert kinds["forward_no_grad"] == "compute"


def _steps_and_evaluation_loops():
    steps = stepscope.snapshot()["steps"]
    return steps["count"] + steps["warmup_excluded"], steps["evaluation_loops"]


def test_an_evaluation_loop_through_steps_is_not_steps_after_training():
    # pytorch/examples' minGPT-ddp runs its test loader through the same
    # steps() loop as its training data (set_grad_enabled(train) in the
    # step): 619 training steps of ~730 ms and 70 evaluation steps of 313 ms
    # read as 687 ms per step.
    model, x = _small_model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def run_epoch(batches, train):
        for _ in stepscope.torch.steps(range(batches)):
            with torch.set_grad_enabled(train):
                loss = model(x).sum()
            if train:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

    handle = stepscope.torch.instrument(model, optimizer)
    try:
        run_epoch(3, True)
        before = _steps_and_evaluation_loops()
        run_epoch(4, False)
        run_epoch(3, True)
        after = _steps_and_evaluation_loops()
        # pytorch/examples' mnist: gradients off around the loop, known at its
        # first fetch: none of its forwards is in a step.
        in_steps = _counts().get(("forward_no_grad", "step"), 0)
        with torch.no_grad():
            for _ in stepscope.torch.steps(range(4)):
                model(x)
        run_epoch(3, True)
        last = _steps_and_evaluation_loops()
        assert _counts().get(("forward_no_grad", "step"), 0) == in_steps
        # A thread that never trained (an inference run) keeps its steps.
        inference = {}

        def infer():
            start = _steps_and_evaluation_loops()
            with torch.no_grad():
                for _ in stepscope.torch.steps(range(4)):
                    model(x)
            inference["grown"] = tuple(b - a for a, b in zip(start, _steps_and_evaluation_loops()))

        thread = threading.Thread(target=infer)
        thread.start()
        thread.join()
    finally:
        handle.remove()
    assert (after[0] - before[0], after[1] - before[1]) == (3, 1)
    assert (last[0] - after[0], last[1] - after[1]) == (3, 1)
    assert inference["grown"] == (4, 0)


def test_a_second_model_instrumented_with_a_name_has_phases_of_its_own():
    # pytorch/examples' fast_neural_style trains a transformer through a
    # fixed VGG loss network: instrumented too, its forward merged into the
    # transformer's 'forward' (and not instrumented, 43% of the step in no phase).
    model, loss_net, x = _small_model(), _small_model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = _counts()
    handles = [stepscope.torch.instrument(model, optimizer), stepscope.torch.instrument(loss_net, name="loss_net")]
    try:
        with stepscope.step():
            y = model(x)
            (y.sum() + loss_net(x * y.mean()).sum()).backward()
            optimizer.step()
            with torch.no_grad():
                loss_net(x)
    finally:
        for handle in handles:
            handle.remove()
    after = _counts()
    names = ("forward", "loss_net.forward", "loss_net.forward_no_grad", "backward", "optimizer")
    grown = {name: after.get((name, "step"), 0) - before.get((name, "step"), 0) for name in names}
    assert grown == {
        "forward": 1,
        "loss_net.forward": 1,
        "loss_net.forward_no_grad": 1,
        "backward": 1,
        "optimizer": 1,
    }, grown
    kinds = {p["name"]: p["kind"] for p in stepscope.snapshot()["phases"]}
    assert kinds["loss_net.forward"] == "compute"
    with pytest.raises(TypeError):
        stepscope.torch.instrument(loss_net, name="")


def test_a_distributed_autograd_backward_is_the_backward_phase(monkeypatch):
    # pytorch/examples' rpc/parameter_server: dist_autograd.backward(cid,
    # [loss]) is not torch.autograd.backward; its time read as time in no
    # phase. A stand-in for it (an RPC context needs init_rpc) records its calls.
    import torch.distributed.autograd as dist_autograd

    calls = []
    monkeypatch.setattr(dist_autograd, "backward", lambda cid, roots: calls.append(cid), raising=False)
    model, x = _small_model(), torch.randn(4, 8)
    before = _counts()
    handle = stepscope.torch.instrument(model)
    try:
        with stepscope.step():
            model(x).sum()
            dist_autograd.backward(7, [])
    finally:
        handle.remove()
    after = _counts()
    assert calls == [7]
    assert after.get(("backward", "step"), 0) - before.get(("backward", "step"), 0) == 1
    dist_autograd.backward(8, [])  # restored: no phase
    assert _counts().get(("backward", "step"), 0) == after.get(("backward", "step"), 0)


def test_an_exception_in_forward_closes_the_forward_phase():
    class Fails(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)

        def forward(self, x):
            self.inner(x)
            raise ValueError("bad batch")

    model = Fails()
    handle = stepscope.torch.instrument(model, submodules=True)
    try:
        with pytest.raises(ValueError):
            model(torch.randn(1, 2))
        assert stepscope._core.thread_depth() == 0
    finally:
        handle.remove()


def test_instrument_rejects_what_is_not_a_model_or_optimizer():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        stepscope.torch.instrument(object())
    with pytest.raises(TypeError, match="step"):
        stepscope.torch.instrument(_small_model(), optimizer=42)


@pytest.mark.parametrize("scheduler_first", [False, True])
def test_an_lr_scheduler_works_with_an_instrumented_optimizer(scheduler_first):
    """mnist/main.py of PyTorch's examples makes StepLR(optimizer) after the
    optimizer: torch wraps optimizer.step through its __self__/__func__, which
    a plain function in its place broke (AttributeError in the user's code)."""
    import warnings

    model, x = _small_model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if scheduler_first:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    handle = stepscope.torch.instrument(model, optimizer)
    if not scheduler_first:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    try:
        before = _counts().get(("optimizer", "step"), 0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()" if the count was lost
            with stepscope.step():
                model(x).sum().backward()
                optimizer.step()
            scheduler.step()
        assert optimizer._step_count == 1
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
        assert _counts().get(("optimizer", "step"), 0) - before == 1
    finally:
        handle.remove()


def test_an_instrumented_model_saves_loads_and_copies_as_without_stepscope(tmp_path):
    """word_language_model of PyTorch's examples checkpoints with
    torch.save(model): a forward wrapper in the model's __dict__ could not be
    pickled (PicklingError after an epoch of training), and copy.deepcopy gave
    a copy whose forward still ran the original's weights."""
    import copy

    model, x = _small_model(), torch.randn(4, 8)
    originals = {cls: vars(cls)["forward"] for cls in (torch.nn.Sequential, torch.nn.Linear, torch.nn.ReLU)}
    handle = stepscope.torch.instrument(model, submodules=True)
    try:
        path = tmp_path / "model.pt"
        torch.save(model, str(path))
        loaded = torch.load(str(path))
        assert torch.equal(loaded(x), model(x))
        twin = copy.deepcopy(model)
        with torch.no_grad():
            for p in twin.parameters():
                p.add_(1.0)
        assert not torch.equal(twin(x), model(x))  # the copy runs its own weights
        before = _counts().get(("forward", "step"), 0)
        with stepscope.step():
            twin(x)
            loaded(x)
        assert _counts().get(("forward", "step"), 0) == before  # copies are not the instrumented model
        with stepscope.step():
            model(x)
        assert _counts().get(("forward", "step"), 0) == before + 1
    finally:
        handle.remove()
    assert all(vars(cls)["forward"] is forward for cls, forward in originals.items())  # remove() put them back


def test_ranks_only_torch_distributed_knows_write_a_report_each(tmp_path):
    # PyTorch's DDP tutorial: mp.spawn, the rank an argument of
    # init_process_group, no RANK in the environment. Before, both ranks
    # wrote the same file and one report was lost without a word.
    _, _, proc = run_loop(tmp_path, "ddp", "processes", "ddp")
    names = sorted(p.name for p in tmp_path.glob("ddp*.json"))
    assert names == ["ddp.rank0.json", "ddp.rank1.json"], (names, proc.stderr)
    for rank in (0, 1):
        report = json.loads((tmp_path / ("ddp.rank%d.json" % rank)).read_text())
        assert report["run"]["rank"] == rank
        assert report["run"]["world_size"] == 2
        assert report["run"]["local_ranks"] == 2  # MASTER_ADDR=localhost: both ranks on this host
        assert report["complete"]
        # 640 samples / 16 per batch / 2 ranks = 20 batches each.
        assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 20
        # The DDP inside the wrapper model: its all-reduce timed, one bucket a
        # step noted, in 16 bits (fp16_compress_hook): half the gradients' bytes.
        grads = 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10  # loops.mlp(32, 64)'s parameters
        assert report["communication"] == {"collectives": 20, "bytes": 20 * 2 * grads, "steps": 20}
        assert report["run"]["config"]["ddp_comm_hook"] == "fp16_compress_hook"
        assert any(p["name"] == "ddp.allreduce" for p in report["phases"])


def test_rpc_trainer_round_trips_are_communication(tmp_path):
    # pytorch/examples' distributed/rpc: the trainer's forward and its
    # DistributedOptimizer wait for a parameter server. Each wait is the phase
    # rpc.wait (kind communication) inside the phase that made the call.
    _, _, proc = run_loop(tmp_path, "rpc", "processes", "rpc")
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("rpc*.json")]
    trainers = [r for r in reports if r["steps"]["count"] > 0]
    assert len(trainers) == 1, ([r["steps"]["count"] for r in reports], proc.stderr)
    report = trainers[0]
    steps = report["steps"]["count"]
    assert steps + report["steps"]["warmup_excluded"] == 40  # 640 samples / 16
    phases = {(p["name"], p["thread_role"]): p for p in report["phases"]}
    wait = phases[("rpc.wait", "step")]
    assert wait["kind"] == "communication"
    # A step: rpc_sync and remote().to_here() in forward, the optimizer's
    # rpc_async to each of the two owners (the trainer itself and the server).
    assert wait["count"] == 4 * steps, wait["count"]
    # Nested: the forward's own time leaves its two waits out.
    forward = phases[("forward", "step")]
    assert forward["self_ms"]["total"] < forward["host_ms"]["total"]
    assert report["bottleneck"]["category"] in ("communication", "unknown"), report["bottleneck"]["summary"]


def test_workers_no_rank_tells_apart_keep_a_report_each(tmp_path):
    # PyTorch's mnist_hogwild: spawned workers share a model, no process group.
    _, _, proc = run_loop(tmp_path, "hog", "processes", "hogwild")
    paths = sorted(tmp_path.glob("hog*.json"))
    assert len(paths) == 2, ([p.name for p in paths], proc.stderr)
    reports = {p.name: json.loads(p.read_text()) for p in paths}
    assert "hog.json" in reports
    moved_name = next(n for n in reports if n != "hog.json")
    moved = reports[moved_name]
    assert moved_name == "hog.pid%d.json" % moved["run"]["pid"]
    assert moved["run"]["pid"] != reports["hog.json"]["run"]["pid"]
    assert any("ran at the same time as this one" in w for w in moved["warnings"]), moved["warnings"]
    assert "instead of replacing it" in proc.stderr
    for report in reports.values():
        assert report["complete"]
        assert report["steps"]["count"] + report["steps"]["warmup_excluded"] == 40


SPAWN_LOOP = '''
import os, sys, time
import torch
import torch.multiprocessing as mp
import stepscope

def worker(rank, ready_dir):
    stepscope.set_rank(rank, 2)
    stepscope.enabled(); stepscope.snapshot()  # starts the collector, waits for it: its signal handlers are in place
    model = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    for i in stepscope.steps(range(10 ** 9)):
        with stepscope.phase("forward"):
            y = model(x).sum()
        with stepscope.phase("backward"):
            y.backward()
        if i == 20:
            open(os.path.join(ready_dir, "rank%d" % rank), "w").close()
        time.sleep(0.002)

if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2)
'''


def test_ctrl_c_on_torch_multiprocessing_spawn_workers_is_in_their_reports(tmp_path):
    """torch.multiprocessing.spawn's workers catch KeyboardInterrupt and exit
    normally, so after Ctrl-C each rank's report said ended_by "exit" and read
    as a whole run. Ctrl-C is sent as a terminal does: SIGINT to the job's
    process group."""
    import os
    import signal
    import sys
    import time

    script = tmp_path / "spawn_loop.py"
    script.write_text(SPAWN_LOOP)
    env = dict(os.environ, STEPSCOPE_OUT=str(tmp_path / "r.{rank}.json"), STEPSCOPE_QUIET="0")

    def default_sigint():  # a background shell job starts with SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + 240
        while not all((tmp_path / ("rank%d" % r)).exists() for r in (0, 1)):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0  # the launcher itself ends on the KeyboardInterrupt
    for rank in (0, 1):
        report = json.loads((tmp_path / ("r.%d.json" % rank)).read_text())
        assert report["run"]["rank"] == rank
        assert report["complete"] is True and report["ended_by"] == "exit", report["ended_by"]
        assert report["interrupted"] is not None and report["interrupted"]["signal"] == "SIGINT"
        assert report["steps"]["count"] + report["steps"]["warmup_excluded"] >= 20
    assert stderr.count("run interrupted by SIGINT (Ctrl-C)") == 2, stderr


def test_a_progress_bar_around_the_loader_or_the_steps_keeps_both_working(tmp_path):
    """Training loops are written `for batch in tqdm(loader)`. Wrapped either
    way round, the loop's steps are counted, the DataLoader's configuration
    is still recorded (steps(tqdm(loader)): tqdm keeps the loader as
    .iterable), and the bar still shows its total (tqdm(steps(loader)) asks
    len(), which steps() passes on)."""
    import os
    import sys

    pytest.importorskip("tqdm")
    out = tmp_path / "r.json"
    script = (
        "import torch, stepscope.torch\n"
        "from tqdm import tqdm\n"
        "ds = torch.utils.data.TensorDataset(torch.randn(64, 4))\n"
        "bar = tqdm(stepscope.torch.steps(torch.utils.data.DataLoader(ds, batch_size=8)))\n"
        "assert bar.total == 8, bar.total\n"
        "assert sum(1 for _ in bar) == 8\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=16, pin_memory=False)\n"
        "assert sum(1 for _ in stepscope.torch.steps(tqdm(loader))) == 4\n"
        "try:\n"
        "    len(stepscope.torch.steps(iter(range(3))))\n"
        "    raise AssertionError('len() of a plain iterator')\n"
        "except TypeError:\n"
        "    pass\n"
    )
    env = dict(os.environ, STEPSCOPE_OUT=str(out), STEPSCOPE_WARMUP="0", STEPSCOPE_QUIET="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["config"]["batch_size"] == 16  # the second loader's, seen through tqdm
    assert report["run"]["config"]["num_workers"] == 0
    assert report["steps"]["count"] == 12
