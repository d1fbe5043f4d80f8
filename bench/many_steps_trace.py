#!/usr/bin/env python3
"""A synthetic PyTorch-profiler trace of N steps, for timing `stepscope analyze`
as a whole process against the number of steps (docs/benchmarks-import.md).

Each step: a DataLoader range, a "## forward ##" range of K aten::linear ->
cudaLaunchKernel -> kernel, then aten::item around a cudaStreamSynchronize
outside every range (as loss.item() leaves it).

    python3 bench/many_steps_trace.py STEPS KERNELS_PER_STEP OUT.json.gz
"""
import gzip
import json
import sys


def trace(steps, kernels):
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    t, corr = 1000.0, 1
    for s in range(steps):
        start = t
        ev.append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t, "dur": 50,
                   "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"})
        t += 50
        ev.append({"ph": "X", "cat": "user_annotation", "name": "## forward ##", "pid": 1, "tid": 1, "ts": t,
                   "dur": kernels * 12})
        gpu = t + 5
        for _ in range(kernels):
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t, "dur": 10,
                       "args": {"External id": corr}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 2, "dur": 5, "args": {"correlation": corr, "External id": corr}})
            gpu = max(gpu, t + 8)
            ev.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7, "ts": gpu,
                       "dur": 9, "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7}})
            gpu += 10
            t += 12
            corr += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": t,
                   "dur": max(20, gpu - t + 5)})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                   "ts": t + 2, "dur": max(10, gpu - t)})
        t = max(t + 25, gpu + 10)
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": start, "dur": t - start})
        t += 5
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}], "traceEvents": ev}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with gzip.open(sys.argv[3], "wt") as f:
        json.dump(trace(int(sys.argv[1]), int(sys.argv[2])), f)
