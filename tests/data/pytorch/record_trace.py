#!/usr/bin/env python3
"""Records a real PyTorch-profiler trace of a small CPU training loop.

    record_trace.py compute OUT.json [--steps N]     # compute-bound MLP
    record_trace.py io OUT.json [--steps N]          # slow Dataset, num_workers=0
    record_trace.py io-workers OUT.json [--steps N]  # the same Dataset, 2 workers
    record_trace.py io-no-schedule OUT.json [--steps N]
        # the io loop profiled as many first tries are: no schedule, no
        # prof.step(), the trace exported after the loop (no ProfilerStep#N)

The loop is what a user writes: a DataLoader, an MLP, SGD, and
torch.profiler.profile(schedule=..., on_trace_ready=...) with prof.step()
once per iteration. No record_function annotations: the trace's own names
(ProfilerStep#N, enumerate(DataLoader)#..., Optimizer.step#...,
autograd::engine::evaluate_function: ...) are what stepscope must read.

Debian's python3-torch 1.13 is built without Kineto, so the trace it writes is
the legacy Chrome trace (a top-level JSON array, "pid": "CPU functions").
A PyTorch with Kineto writes the {"traceEvents": [...]} form; both must import.

Exit codes: 0 written, 77 torch is not installed (ctest's SKIP_RETURN_CODE).
"""
import argparse
import gzip
import sys
import time

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    print("skipped: python3-torch is not installed (scripts/install-deps --all)", file=sys.stderr)
    sys.exit(77)


class SlowDataset(Dataset):
    """Each sample costs `delay_s` of sleeping, like a slow disk or decoder."""

    def __init__(self, size, features, delay_s):
        self.size, self.features, self.delay_s = size, features, delay_s

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=g), torch.tensor(index % 10)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["compute", "io", "io-workers", "io-no-schedule"])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=12, help="active profiler steps")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)  # the machine is shared; one thread keeps runs comparable
    if args.mode == "compute":
        # A wide MLP on a big batch: the math is the step, the input is free.
        features, hidden, batch, delay_s, workers = 256, 1024, 64, 0.0, 0
    else:
        # A model of ~100 ms a step fed by a Dataset that sleeps 4 ms a sample
        # (128 ms a batch): input-bound without workers; with workers that
        # prefetched, only the hand-over of a batch is left. (With a 30 ms
        # model the hand-over alone, 9.7 ms a step on a CI machine whose
        # other test took the cores, was 22% of the step: input-bound.)
        features, hidden, batch, delay_s, workers = 128, 1024, 32, 0.004, 0
        if args.mode == "io-workers":
            workers = 2
        if args.mode == "io-no-schedule":
            # Its test also wants input to be most of the step: 256 ms a batch
            # keeps it so when a busy machine makes the ~100 ms of compute 2.5x
            # slower (a sleep does not slow down; the math does).
            delay_s = 0.008
    wait, warmup = 1, 1
    total = wait + warmup + args.steps
    dataset = SlowDataset((total + 2) * batch, features, delay_s)
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers,
                        persistent_workers=workers > 0, prefetch_factor=8 if workers > 0 else 2)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    written = []

    def on_trace_ready(prof):
        prof.export_chrome_trace(args.out)
        written.append(args.out)

    if workers > 0:
        # Let the workers fill their prefetch queues (2 x 8 batches: every
        # batch the loop takes) so the profiled steps measure a pipeline that
        # keeps up, even on a busy machine.
        iterator = iter(loader)
        time.sleep(3.0)
    else:
        iterator = None
    scheduled = args.mode != "io-no-schedule"
    options = {}
    if scheduled:
        options = dict(schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=args.steps, repeat=1),
                       on_trace_ready=on_trace_ready)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **options) as prof:
        source = iterator if iterator is not None else loader
        for step, (x, y) in enumerate(source):
            if step >= total:
                break
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if scheduled:
                prof.step()
    if not scheduled:
        on_trace_ready(prof)
    if not written:
        print("error: the profiler wrote no trace", file=sys.stderr)
        return 1
    if args.out.endswith(".gz"):
        # export_chrome_trace writes plain JSON whatever the name; gzip it in place.
        with open(args.out, "rb") as src:
            data = src.read()
        if not data.startswith(b"\x1f\x8b"):
            with gzip.open(args.out, "wb") as dst:
                dst.write(data)
    print(f"{args.out}: torch {torch.__version__}, {args.mode}, {args.steps} active steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
