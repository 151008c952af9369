"""Memory of repeated runs in one process, as a sweep worker or an optimizer calling flowsim
as its estimator makes them: the resident set after each run of the same training
iteration, and its growth from the second run to the last.

    python scripts/bench_loop_memory.py                 # Llama 3 70B on 1,024 H100s, 8 runs
    python scripts/bench_loop_memory.py --runs 12 --model flow

A run that leaves its objects in reference cycles grows the process by about what one run
holds, every run, until a full cyclic collection (which a loop of runs may not trigger for
long); the target is growth under a tenth of the first run's resident set over the loop.
Linux only (it reads ``/proc/self/statm``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

#: growth from the second run to the last, as a fraction of the resident set after the first
TARGET_GROWTH = 0.10


def resident_mib() -> float:
    """The process's resident set now (MiB)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--runs", type=int, default=8, help="runs (default: %(default)s)")
    parser.add_argument("--model", choices=("analytical", "flow"), default="analytical")
    parser.add_argument("--network", default="dgx_h100",
                        help="network preset or file (default: %(default)s, 128 nodes)")
    parser.add_argument("--workload", default="llama3_70b",
                        help="bundled workload or file (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error("--runs: expected at least 3")
    import flowsim

    network = flowsim.load_network(args.network)
    seconds, resident = [], []
    for run in range(args.runs):
        start = time.perf_counter()
        flowsim.simulate(network, args.workload, "nccl", model=args.model)
        seconds.append(time.perf_counter() - start)
        resident.append(resident_mib())
        print(f"run {run + 1:3d}: {seconds[-1]:7.2f} s, resident {resident[-1]:8.0f} MiB")
    growth = (resident[-1] - resident[1]) / resident[0]
    verdict = "met" if growth < TARGET_GROWTH else "MISSED"
    print(f"median run {statistics.median(seconds[1:]):.2f} s; growth from run 2 to "
          f"{args.runs}: {resident[-1] - resident[1]:+.0f} MiB ({100 * growth:+.1f}% of run 1's "
          f"{resident[0]:.0f} MiB), target < {100 * TARGET_GROWTH:.0f}%: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
