"""The collector's share of a core on a PyTorch training loop (issue 31).

An MNIST-sized MLP on a DataLoader, CPU only, instrumented the way the README
shows (stepscope.torch.instrument + stepscope.torch.steps). Prints what the
report says the collector thread cost: system.collector_cpu_ms over the run.

    STEPSCOPE_QUIET=1 PYTHONPATH=build/ci/python python3 bench/collector_share.py --epochs 30

Compare builds in the same session, alternating (docs/benchmarks.md).
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import stepscope
import stepscope.torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=6000)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(args.samples, 1, 28, 28), torch.randint(0, 10, (args.samples,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    stepscope.torch.instrument(model, optimizer)
    for _ in range(args.epochs):
        for x, y in stepscope.torch.steps(loader):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    path = stepscope.finish()
    with open(path) as f:
        report = json.load(f)
    system = report["system"]
    print(
        f"collector {system['collector_cpu_ms']:.2f} ms of CPU over {system['run_wall_s']:.2f} s: "
        f"{100 * report['overhead']['collector_core_fraction']:.3f}% of a core; "
        f"{system['samples']} samples; verdict {report['bottleneck'].get('category')} "
        f"{report['bottleneck'].get('confidence', 0):.2f}"
    )


if __name__ == "__main__":
    main()
