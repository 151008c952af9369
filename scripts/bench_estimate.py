"""Throughput of the batched estimator, ``flowsim.estimate_batch``: grid points per second,
warm (in-process, after a warm-up call that compiles or loads the kernels), the median of
several repeats; and the time of a one-point call, as an optimizer makes them.

    python scripts/bench_estimate.py              # 1M points, 5 repeats
    python scripts/bench_estimate.py --points 200000 --repeats 9

The target of issue 17 is 5 M points/s for the 2-D ring x switch all-reduce (random
bandwidths, one size); the other rows are the bundled 4,096-NPU 3-D network with varied sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

#: the issue-17 target, million grid points per second (warm)
TARGET_MPTS = 5.0
RING_SWITCH = {"topology": ["Ring", "Switch"], "npus_count": [8, 16], "bandwidth": [100, 50],
               "latency": [500, 500]}


def cases(n: int) -> list[tuple[str, dict[str, Any], float | None]]:
    """(name, estimate_batch arguments, target M points/s or None)."""
    import numpy as np

    rng = np.random.default_rng(0)
    bw2, bw3 = rng.uniform(10, 400, (n, 2)), rng.uniform(10, 400, (n, 3))
    one_size, sizes = np.full(n, 1 << 26), rng.integers(1 << 16, 1 << 30, n)
    latency = rng.uniform(0, 1000, (n, 3))
    r3 = {"network": "r16_fc16_sw16", "system": "ring_4chunks_3d"}
    return [
        ("2-D ring x switch all-reduce, 64 MiB, random bandwidths",
         {"network": RING_SWITCH, "collective": "all_reduce", "size": one_size,
          "bandwidth": bw2}, TARGET_MPTS),
        ("2-D ring x switch all-reduce, varied sizes",
         {"network": RING_SWITCH, "collective": "all_reduce", "size": sizes, "bandwidth": bw2},
         None),
        ("3-D r16_fc16_sw16 all-to-all, ring_4chunks_3d, 64 MiB",
         {**r3, "collective": "all_to_all", "size": one_size, "bandwidth": bw3}, None),
        ("3-D r16_fc16_sw16 all-to-all, varied sizes and latencies",
         {**r3, "collective": "all_to_all", "size": sizes, "bandwidth": bw3,
          "latency": latency}, None),
        ("3-D r16_fc16_sw16 all-reduce, varied sizes and latencies",
         {**r3, "collective": "all_reduce", "size": sizes, "bandwidth": bw3,
          "latency": latency}, None),
    ]


def median_seconds(call: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--points", type=int, default=1_000_000,
                        help="grid points per call (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed calls per case (default: %(default)s)")
    args = parser.parse_args(argv)
    import numpy as np

    import flowsim

    print(f"warmup (compile or load kernels): {flowsim.warmup():.2f} s")
    print(f"{'case':<60} {'M points/s':>10}")
    for name, kwargs, target in cases(args.points):
        few = {k: v[:10] if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        flowsim.estimate_batch(**few)   # this network's structure, once
        seconds = median_seconds(lambda kw=kwargs: flowsim.estimate_batch(**kw), args.repeats)
        rate = args.points / seconds / 1e6
        verdict = "" if target is None else \
            f"  target >= {target:g}: " + ("met" if rate >= target else "MISSED")
        print(f"{name:<60} {rate:10.2f}{verdict}")
    size, bw = np.array([1 << 26]), np.array([[100.0, 50.0]])
    one = median_seconds(lambda: flowsim.estimate_batch(RING_SWITCH, "all_reduce", size,
                                                        bandwidth=bw), 50)
    print(f"{'one-point call (2-D ring x switch all-reduce), ms':<60} {one * 1e3:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
