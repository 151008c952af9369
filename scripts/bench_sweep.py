"""Benchmarks of the sweep machinery and the estimator (medians; machine-dependent, so they
live here and not in the unit tests).

    python scripts/bench_sweep.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import flowsim
from flowsim.sweep import load_spec

SPEC_64 = {
    "base": {"network": {"topology": ["Ring", "Switch"], "npus_count": [8, 8],
                         "bandwidth": [100, 25], "latency": [200, 1000]},
             "system": {"preferred-dataset-splits": 4,
                        "all-reduce-implementation": ["ring", "ring"],
                        "all-to-all-implementation": ["direct", "direct"]},
             "model": "flow"},
    "axes": {"network.bandwidth[0]": [25, 50, 100, 200, 400],
             "network.bandwidth[1]": [12.5, 25, 50, 100, 200],
             "size": ["64KiB", "1MiB", "4MiB", "16MiB", "64MiB"],
             "collective": ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"],
             "system.active-chunks-per-dimension": [1, 2]},
}


def median_time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    print(f"warmup (compile or load kernels): {flowsim.warmup():.2f} s")
    rng = np.random.default_rng(0)
    n = 1_000_000
    sizes = rng.integers(1 << 20, 1 << 30, n)
    bw = rng.uniform(10, 400, (n, 3))
    lat = rng.uniform(50, 1000, (n, 3))

    def batched():
        flowsim.estimate_batch("r4_fc8_sw4", "all_reduce", sizes, "ring_4chunks_3d",
                               bandwidth=bw, latency=lat)

    print(f"estimate_batch, 1M points (3-D ring all-reduce, 4 chunks): "
          f"{median_time(batched):.3f} s")

    def one():
        flowsim.estimate("r4_fc8_sw4", "all_reduce", "64MiB", "ring_4chunks_3d")

    print(f"estimate, one point (128 NPUs, analytical): {median_time(one, 50) * 1e3:.2f} ms")
    spec = load_spec(SPEC_64)
    print(f"flow-model sweep of 64-NPU collectives: {spec.size} points")
    serial = median_time(lambda: flowsim.sweep(spec, jobs=1), 3)
    print(f"  1 process:   {serial:.2f} s")
    parallel = median_time(lambda: flowsim.sweep(spec, jobs=2), 3)
    print(f"  2 processes: {parallel:.2f} s  (speed-up {serial / parallel:.2f}x)")
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    sys.exit(main())
