"""What a phase costs from Python, against the usual alternatives, in one run.

    PYTHONPATH=build/python STEPSCOPE_QUIET=1 STEPSCOPE_OUT=/dev/null \
        /usr/bin/python3 bench/python_bench.py [--iterations N] [--rounds R]

Cases (each a `with` around an empty body, N times; R rounds interleaved so
a busy machine's drift hits every case alike; the median round is printed):
  empty loop            the loop alone (subtracted from the others)
  no-op context manager a `with` of an object whose __enter__/__exit__ do
                        nothing (a Python class): the floor of any `with`
  stepscope.phase       `with stepscope.phase("bench"):` — recording, the
                        collector draining
  stepscope (held)      `with p:` with p = stepscope.phase("bench") held
  decorated call        a @stepscope.phase function vs the same function plain
  record_function       `with torch.profiler.record_function("bench"):`
                        (no profiler running: its cheapest case), when torch
                        is installed
Ratios are to the no-op context manager. Results: docs/python.md.
"""

import argparse
import os
import statistics
import time

import stepscope


_clock = time.thread_time_ns


class NoOp:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def empty(n):
    t = _clock()
    for _ in range(n):
        pass
    return _clock() - t


def noop(n):
    cm = NoOp()
    t = _clock()
    for _ in range(n):
        with cm:
            pass
    return _clock() - t


def phase(n):
    t = _clock()
    for _ in range(n):
        with stepscope.phase("bench"):
            pass
    return _clock() - t


def phase_held(n):
    p = stepscope.phase("bench")
    t = _clock()
    for _ in range(n):
        with p:
            pass
    return _clock() - t


def plain_fn(x):
    return x


@stepscope.phase("bench.decorated")
def decorated_fn(x):
    return x


def call_plain(n):
    t = _clock()
    for i in range(n):
        plain_fn(i)
    return _clock() - t


def call_decorated(n):
    t = _clock()
    for i in range(n):
        decorated_fn(i)
    return _clock() - t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--clock",
        choices=("thread", "wall"),
        default="thread",
        help="thread: this thread's CPU time (what the loop pays, robust on a loaded machine); wall: perf_counter",
    )
    args = parser.parse_args()
    global _clock
    _clock = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
    cases = [
        ("empty loop", empty),
        ("no-op context manager", noop),
        ("stepscope.phase", phase),
        ("stepscope (held)", phase_held),
        ("plain call", call_plain),
        ("decorated call", call_decorated),
    ]
    try:
        import torch

        def record_function(n):
            t = _clock()
            for _ in range(n):
                with torch.profiler.record_function("bench"):
                    pass
            return _clock() - t

        cases.append(("record_function", record_function))
        torch_version = torch.__version__
    except ImportError:
        torch_version = None

    n = args.iterations
    for _, fn in cases:  # warm up: first records register the thread, intern the name
        fn(1000)
    rounds = {name: [] for name, _ in cases}
    for _ in range(args.rounds):
        for name, fn in cases:
            rounds[name].append(fn(n) / n)
    per = {name: statistics.median(v) for name, v in rounds.items()}
    loop = per["empty loop"]
    floor = per["no-op context manager"] - loop
    print("stepscope %s, torch %s, %d iterations x %d rounds (median round), clock %s, load %.2f" % (
        stepscope.__version__, torch_version, n, args.rounds, args.clock, os.getloadavg()[0]))
    print("%-24s %10s %10s %8s" % ("case", "ns/iter", "ns - loop", "x no-op"))
    for name, _ in cases:
        net = per[name] - loop
        ratio = net / floor if floor > 0 and name not in ("empty loop", "plain call", "decorated call") else float("nan")
        print("%-24s %10.1f %10.1f %8.2f" % (name, per[name], net, ratio))
    print("decorator overhead per call: %.1f ns" % (per["decorated call"] - per["plain call"]))
    if "record_function" in per:
        print("record_function / stepscope.phase: %.2f" % ((per["record_function"] - loop) / (per["stepscope.phase"] - loop)))
    report = stepscope.snapshot()
    dropped = report["dropped_records"]
    print("records dropped (ring full): %d of %d" % (dropped, report["total_records"]))


if __name__ == "__main__":
    main()
