"""Real torch CPU training loops, one per mode, each run in its own process by
the tests (a process has one stepscope run and one report):

    python loops.py compute          # an MLP on in-memory batches: compute-bound
    python loops.py slow-data W      # the same kind of step fed by a Dataset that sleeps
                                     # per sample, W DataLoader workers (0: in the step)
    python loops.py epochs P         # 3 epochs over a DataLoader with 2 workers,
                                     # persistent_workers=P (0 or 1)
    python loops.py checkpoint N     # the compute loop saving a checkpoint every N steps,
                                     # with no phase around it
    python loops.py compare          # instrument() and hand-instrumented phases, alternating
    python loops.py contract         # the API and report contract (finish(), then misuse)
    python loops.py at-exit          # no finish(): the report is written at exit
    python loops.py processes K      # two spawned workers without RANK: K "ddp" (mp.spawn +
                                     # init_process_group), "rpc" (a parameter server and a
                                     # trainer) or "hogwild" (a shared model)

The report goes to STEPSCOPE_OUT (the tests set it); some modes print one
JSON line of their own observations on stdout.
"""

import json
import os
import sys
import time
import warnings

import torch

import stepscope
import stepscope.torch

torch.manual_seed(0)
# One intra-op thread: the tests run on a busy 2-core machine, and the loops
# are built around one core's speed.
torch.set_num_threads(1)


def mlp(width_in, hidden, classes=10):
    return torch.nn.Sequential(
        torch.nn.Linear(width_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, classes),
    )


def train(model, optimizer, loader, epochs=1):
    for _ in range(epochs):
        for x, y in stepscope.torch.steps(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def compute_mode():
    model = mlp(256, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(64 * 40, 256), torch.randint(0, 10, (64 * 40,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    stepscope.torch.instrument(model, optimizer)
    stepscope.set_config("loop", "compute")
    train(model, optimizer, loader)


class SlowDataset(torch.utils.data.Dataset):
    """Each sample waits (a slow disk or decoder, off CPU) before it is built."""

    def __init__(self, n, width, delay_s):
        self.n, self.width, self.delay_s = n, width, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.width, generator=g), i % 10


def slow_data_mode(workers):
    # 32 samples x 0.75 ms = 24 ms (more with sleep's overshoot) of waiting
    # per batch, against about 14 ms of compute on this machine's idle core:
    # with 0 workers the step waits for all of it; 4 workers make a batch
    # every ~7 ms, ahead of the step. The wait dominates so the gain stays
    # well outside the noise on a loaded machine too, where the compute
    # slows down and the sleeps do not (CI once saw 0.25 ms samples give
    # only -21% with a 24% drift between a run's halves).
    model = mlp(256, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SlowDataset(32 * 50, 256, 0.00075), batch_size=32, num_workers=workers)
    stepscope.torch.instrument(model, optimizer)
    stepscope.set_config("loop", "slow-data")
    train(model, optimizer, loader)


def epochs_mode(persistent):
    # pytorch/examples' dcgan shape: `for epoch in range(n): for data in
    # loader:` with workers. Without persistent_workers every iter(loader)
    # starts new worker processes, and the first step of each epoch waits.
    model = mlp(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(16 * 30, 64), torch.randint(0, 10, (16 * 30,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=2, persistent_workers=persistent)
    stepscope.torch.instrument(model, optimizer)
    stepscope.set_config("persistent_workers", persistent)
    train(model, optimizer, loader, epochs=3)


def checkpoint_mode(every, path):
    # As training scripts are written: `if step % N == 0: torch.save(...)` in
    # the loop body, no phase around it. The sleep stands for the upload or
    # fsync behind a real checkpoint (40 ms against a step of a few ms, off
    # CPU, so the machine's load does not blur it).
    model = mlp(64, 128)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(32 * 300, 64), torch.randint(0, 10, (32 * 300,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    stepscope.torch.instrument(model, optimizer)
    for i, (x, y) in enumerate(stepscope.torch.steps(loader)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i > 0 and i % every == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
            time.sleep(0.04)


def compare_mode():
    """instrument() against the same loop instrumented by hand, epochs
    alternating in one process (so machine drift hits both alike); the hand
    phases are named hand.* so the two stay apart in the report."""
    model = mlp(256, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(32 * 20, 256), torch.randint(0, 10, (32 * 20,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    hand_forward = stepscope.phase("hand.forward", "compute")
    hand_backward = stepscope.phase("hand.backward", "compute")
    hand_optimizer = stepscope.phase("hand.optimizer", "compute")
    for epoch in range(8):
        if epoch % 2 == 0:
            handle = stepscope.torch.instrument(model, optimizer)
            train(model, optimizer, loader)
            handle.remove()
        else:
            for x, y in stepscope.torch.steps(loader):
                with hand_forward:
                    out = model(x)
                loss = torch.nn.functional.cross_entropy(out, y)
                optimizer.zero_grad()
                with hand_backward:
                    loss.backward()
                with hand_optimizer:
                    optimizer.step()


def contract_mode():
    seen = {}
    stepscope.set_config("batch_size", 32)
    stepscope.set_config("precision", "fp32")
    stepscope.set_config("compiled", False)
    for _ in stepscope.steps(range(12)):
        with stepscope.phase("forward"):
            pass
        with stepscope.phase("h2d", kind="memory"):
            pass
    path = stepscope.finish()
    seen["finish"] = path
    seen["finish_again"] = stepscope.finish()
    seen["enabled_after"] = stepscope.enabled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with stepscope.phase("forward"):
            pass
        with stepscope.step():
            pass
        stepscope.next_step()
        for _ in stepscope.steps(range(3)):
            pass
    seen["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    seen["depth_after"] = stepscope._core.thread_depth()
    print(json.dumps(seen))


def at_exit_mode():
    for _ in stepscope.steps(range(7)):
        with stepscope.phase("forward"):
            pass


def next_step_tail_mode():
    """PyTorch's regression example's shape: next_step() at the top of the loop,
    most of the step in no phase, then work after the loop (a 0.3 s sleep) and
    the report at exit."""
    import time

    for _ in range(30):
        stepscope.next_step()
        with stepscope.phase("forward"):
            pass
        sum(range(2000))  # the loop's own Python, in no phase
    time.sleep(0.3)


def _small_loader(rank=0, world_size=1):
    data = torch.utils.data.TensorDataset(torch.randn(16 * 40, 32), torch.randint(0, 10, (16 * 40,)))
    sampler = None
    if world_size > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world_size, rank=rank)
    return torch.utils.data.DataLoader(data, batch_size=16, sampler=sampler)


class _Holder(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def _ddp_worker(rank, world_size, port):
    import torch.distributed as dist

    torch.set_num_threads(1)
    # As PyTorch's DDP tutorial does: the rendezvous in the environment, the
    # rank an argument.
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    # The DDP part inside a wrapper, as pytorch/examples' rpc/ddp_rpc holds it
    # (`self.fc = DDP(...)`): instrument() finds it and times its all-reduce.
    model = _Holder(torch.nn.parallel.DistributedDataParallel(mlp(32, 64)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    stepscope.torch.instrument(model, optimizer)
    # DDP's 16-bit compression, registered after instrument() as a user does.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model.inner.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    train(model, optimizer, _small_loader(rank, world_size))
    dist.destroy_process_group()


def _hogwild_worker(rank, model):
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    stepscope.torch.instrument(model, optimizer)
    train(model, optimizer, _small_loader())


def _rpc_worker(rank, world_size, port):
    """pytorch/examples' distributed/rpc shape: rank 0 a parameter server
    holding a layer, rank 1 a trainer whose forward calls it twice a step
    (rpc_sync, and remote() + to_here()), with dist_autograd.backward and a
    DistributedOptimizer (an rpc_async to each owner, waited)."""
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    from torch.distributed.optim import DistributedOptimizer

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=120)
    rpc.init_rpc("ps" if rank == 0 else "trainer", rank=rank, world_size=world_size, rpc_backend_options=options)
    if rank == 1:
        remote = rpc.remote("ps", torch.nn.Linear, args=(32, 32))
        local = torch.nn.Linear(32, 10)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.local = local

            def forward(self, x):
                x = rpc.rpc_sync("ps", _call_module, args=(remote, x))
                x = rpc.remote("ps", _call_module, args=(remote, x)).to_here()
                return self.local(x)

        params = [rpc.RRef(p) for p in local.parameters()] + rpc.rpc_sync("ps", _parameter_rrefs, args=(remote,))
        model = Net()
        optimizer = DistributedOptimizer(torch.optim.SGD, params, lr=0.01)
        api, wait = rpc.api._invoke_rpc, torch._C.Future.wait
        # Another model instrumented first (it installs the RPC timing) and
        # taken back: the timing stays for the model still instrumented.
        other = stepscope.torch.instrument(torch.nn.Linear(2, 2))
        handle = stepscope.torch.instrument(model, optimizer)
        other.remove()
        # Calls never waited for (fire and forget) past the bound on marked
        # futures: the oldest make room, the step's own are still timed.
        stepscope.torch._MAX_MARKED_FUTURES = 8
        forgotten = [rpc.rpc_async("ps", torch.add, args=(torch.ones(1), 1)) for _ in range(12)]
        for x, y in stepscope.torch.steps(_small_loader()):
            with dist_autograd.context() as context:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                dist_autograd.backward(context, [loss])
                optimizer.step(context)
        torch.futures.wait_all(forgotten)
        handle.remove()
        assert rpc.api._invoke_rpc is api and torch._C.Future.wait is wait, "remove() left RPC wrapped"
    rpc.shutdown()


def _call_module(rref, x):
    return rref.local_value()(x)


def _parameter_rrefs(rref):
    import torch.distributed.rpc as rpc

    return [rpc.RRef(p) for p in rref.local_value().parameters()]


def processes_mode(kind):
    """Two worker processes started with the spawn method and no RANK in their
    environment: "ddp" as PyTorch's DDP tutorial does (mp.spawn, the rank given
    to init_process_group), "hogwild" as its mnist_hogwild example does (a
    shared model, no process group)."""
    import socket

    import torch.multiprocessing as mp

    if kind in ("ddp", "rpc"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_ddp_worker if kind == "ddp" else _rpc_worker, args=(2, port), nprocs=2)
        return
    model = mlp(32, 64)
    model.share_memory()
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=_hogwild_worker, args=(rank, model)) for rank in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if any(w.exitcode != 0 for w in workers):
        sys.exit("a worker failed: %s" % [w.exitcode for w in workers])


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "compute":
        compute_mode()
    elif mode == "slow-data":
        slow_data_mode(int(sys.argv[2]))
    elif mode == "epochs":
        epochs_mode(sys.argv[2] == "1")
    elif mode == "checkpoint":
        checkpoint_mode(int(sys.argv[2]), sys.argv[3])
    elif mode == "compare":
        compare_mode()
    elif mode == "contract":
        contract_mode()
    elif mode == "at-exit":
        at_exit_mode()
    elif mode == "processes":
        processes_mode(sys.argv[2])
    elif mode == "next-step-tail":
        next_step_tail_mode()
    else:
        sys.exit("unknown mode " + mode)
