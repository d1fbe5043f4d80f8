"""The tutorial's profiling example, done twice: timed with time.time() as the
tutorial does it, and with stepscope — side by side.

    scripts/demo --python                       # builds the package and runs this
    PYTHONPATH=build/python /usr/bin/python3 examples/python/seed_step.py [--steps 100] [--workers 0]

The tutorial (its chapter 1.5, "a simple profiling example") times four
phases of each step with time.time():
  data       only `data.cuda()` — the batch was fetched by the loop header
             (`for ... in enumerate(data_loader)`), outside every timer;
  forward, backward, optimizer
             on a GPU, how long it took to *launch* the work, not to run it:
             nothing synchronises, so the time lands in whichever later call
             waits for the device.
Here the loader does real per-sample work (a decode-like transform), so the
fetch the tutorial never sees is most of the step. stepscope times the loop
itself (stepscope.torch.steps: the fetch is the step's data phase), the
model's phases from its hooks (stepscope.torch.instrument), and on a GPU
the device time of each phase (CUDA events; not yet run on a GPU).
Runs on the CPU when there is no GPU (then "h2d" is a no-op copy).
"""

import argparse
import os
import sys
import time

import torch

import stepscope
import stepscope.torch


class DecodedImages(torch.utils.data.Dataset):
    """Synthetic 3x32x32 images with a per-sample decode-like cost (a blur
    and normalisation done sample by sample, as an image decoder would)."""

    def __init__(self, n, decode_passes):
        self.n, self.decode_passes = n, decode_passes
        self.kernel = torch.ones(3, 1, 3, 3) / 9.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(1, 3, 32, 32, generator=g)
        for _ in range(self.decode_passes):
            image = torch.nn.functional.conv2d(image, self.kernel, padding=1, groups=3)
        image = (image - image.mean()) / (image.std() + 1e-6)
        return image[0], i % 10


def make_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, 10),
    )


def tutorial_profile(model, optimizer, data_loader, device, steps):
    """The tutorial's profile_training_step, unchanged but for .to(device)
    (the tutorial's .cuda()) and a wall clock around the whole loop."""
    model.train()
    times = {"data": [], "forward": [], "backward": [], "optimizer": []}
    loop_start = time.time()
    for batch_idx, (data, target) in enumerate(data_loader):
        if batch_idx >= steps:
            break
        t0 = time.time()
        data, target = data.to(device), target.to(device)
        times["data"].append(time.time() - t0)

        t0 = time.time()
        output = model(data)
        loss = torch.nn.functional.cross_entropy(output, target)
        times["forward"].append(time.time() - t0)

        t0 = time.time()
        loss.backward()
        times["backward"].append(time.time() - t0)

        t0 = time.time()
        optimizer.step()
        optimizer.zero_grad()
        times["optimizer"].append(time.time() - t0)
    wall = time.time() - loop_start
    n = len(times["data"])
    return {k: 1000 * sum(v) / len(v) for k, v in times.items()}, 1000 * wall / n


def stepscope_profile(model, optimizer, data_loader, device, steps):
    """The same loop body; stepscope times the loop and the model."""
    handle = stepscope.torch.instrument(model, optimizer)
    model.train()
    for batch_idx, (data, target) in enumerate(stepscope.torch.steps(data_loader)):
        if batch_idx >= steps:
            break
        with stepscope.phase("h2d"):
            data, target = data.to(device), target.to(device)
        output = model(data)
        loss = torch.nn.functional.cross_entropy(output, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    handle.remove()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (0: decode in the step, as a first attempt does)")
    parser.add_argument("--decode-passes", type=int, default=6, help="per-sample decode cost")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DecodedImages(args.batch_size * (args.steps + 1), args.decode_passes)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, num_workers=args.workers)
    stepscope.set_config("decode_passes", args.decode_passes)

    hand, wall_per_step = tutorial_profile(model, optimizer, loader, device, args.steps)
    stepscope_profile(model, optimizer, loader, device, args.steps)
    report = stepscope.snapshot()

    def phase_ms(name):
        rows = [p for p in report["phases"] if p["name"] == name and p["thread_role"] == "step"]
        return rows[0]["host_ms"]["mean"] if rows else 0.0

    step_ms = report["steps"]["wall_ms"]["mean"]
    print()
    print("the tutorial's step, %d steps on %s, %d loader workers" % (args.steps, device.type, args.workers))
    print("%-12s %16s %16s" % ("phase", "time.time() ms", "stepscope ms"))
    print("%-12s %16.2f %16.2f   <- the tutorial's 'data' is only the copy; stepscope's is the fetch" % (
        "data", hand["data"], phase_ms("data")))
    print("%-12s %16s %16.2f" % ("h2d", "(in 'data')", phase_ms("h2d")))
    for name in ("forward", "backward", "optimizer"):
        print("%-12s %16.2f %16.2f" % (name, hand[name], phase_ms(name)))
    hand_sum = sum(hand.values())
    print("%-12s %16.2f %16.2f" % ("sum/step", hand_sum, step_ms))
    print()
    print("time.time(): the four timers add up to %.2f ms, but a step really took %.2f ms:" % (hand_sum, wall_per_step))
    print("  %.0f%% of each step is in no timer (the fetch in the loop header)." % (
        100 * max(0.0, 1 - hand_sum / wall_per_step)))
    verdict = report["bottleneck"]
    print("stepscope: %s-bound (confidence %.2f): %s" % (verdict["category"], verdict["confidence"], verdict["summary"]))
    if device.type == "cuda":
        print("(on a GPU the time.time() numbers are launch times too; stepscope's device_ms are CUDA-event times)")
    path = stepscope.finish()  # the summary table on stderr, the JSON report at `path`
    print("report: %s  (stepscope show %s)" % (path, path), file=sys.stderr)


if __name__ == "__main__":
    main()
