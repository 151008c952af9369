"""Scaling series: ring all-reduce (1 GiB, 16 chunks, localBWAware) on 3-D Ring x
FullyConnected x Switch systems from 64 to 131,072 NPUs, warm medians, for the analytical
model, the flow model, and the flow model's raw engine (every step's flows simulated: no
replay of isolated steps); prints a table and draws scaling.png (wall time against NPUs,
and the raw engine's against simulated flows x rate recomputations, log-log; pass
``-o docs/scaling.png`` to refresh the documentation's figure).

    python scripts/bench_scaling.py [--repeats 3] [--no-symmetry]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import flowsim
from flowsim._atomic import refuse_missing_folder, save_figure
from flowsim.results import from_attrs

#: (label, model, replay isolated steps)
RUNS = [("analytical", "analytical", True), ("flow", "flow", True),
        ("flow, raw engine", "flow", False)]

SHAPES = [(4, 4, 4), (8, 8, 4), (8, 8, 8), (16, 8, 8), (16, 16, 16), (16, 32, 16),
          (16, 32, 32), (16, 64, 32), (32, 64, 32), (32, 64, 64)]
SYSTEM = {"preferred-dataset-splits": 16, "endpoint-delay": 10, "local-mem-bw": 1600,
          "collective-optimization": "localBWAware",
          "all-reduce-implementation": ["ring", "ring", "ring"]}


def network(shape: tuple[int, int, int]) -> dict:
    return {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": list(shape),
            "bandwidth": [200, 100, 50], "latency": [100, 200, 500]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-symmetry", action="store_true",
                        help="simulate every group (the flow model's raw cost)")
    parser.add_argument("-o", "--output", default="scaling.png")
    args = parser.parse_args(argv)
    refuse_missing_folder(parser, args.output, "--output")
    flowsim.warmup()
    rows = []
    print(f"{'NPUs':>6} {'model':>16} {'flows':>10} {'simulated':>10} {'rate comp.':>10} "
          f"{'events':>7} {'wall s':>8}")
    for shape in SHAPES:
        for label, model, replay in RUNS:
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                ds = flowsim.simulate_collective(network(shape), "all_reduce", "1GiB", SYSTEM,
                                                 model=model, symmetry=not args.no_symmetry,
                                                 replay=replay)
                times.append(time.perf_counter() - start)
            stats = from_attrs(ds.attrs).as_dict()
            npus = shape[0] * shape[1] * shape[2]
            wall = statistics.median(times)
            rows.append((npus, label, stats, wall))
            print(f"{npus:>6} {label:>16} {stats['flows']:>10} {stats['simulated_flows']:>10} "
                  f"{stats['rate_computations']:>10} {stats['events']:>7} {wall:>8.3f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for (label, _, _), marker in zip(RUNS, "os^"):
        pts = [r for r in rows if r[1] == label]
        axes[0].loglog([r[0] for r in pts], [r[3] for r in pts], marker=marker, label=label)
    raw = [r for r in rows if r[1] == RUNS[2][0]]
    work = [max(r[2]["simulated_flows"], 1) * max(r[2]["rate_computations"], 1) for r in raw]
    axes[1].loglog(work, [r[3] for r in raw], marker="^", color="C2", label=RUNS[2][0])
    axes[0].set_xlabel("NPUs")
    axes[0].set_ylabel("wall time (s), warm median")
    axes[0].set_title("ring all-reduce 1 GiB, 16 chunks, 3-D")
    axes[1].set_xlabel("simulated flows x rate recomputations")
    axes[1].set_ylabel("wall time (s)")
    axes[1].set_title("flow engine cost")
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    fig.tight_layout()
    save_figure(fig, args.output, option="--output")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
