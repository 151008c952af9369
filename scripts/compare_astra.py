"""Compare flowsim with ASTRA-sim's reference runs (shared/validation/astra_sim/cases.csv).

    python scripts/compare_astra.py [path/to/validation]

Congestion-unaware rows are compared with flowsim's analytical model (they must agree within
1%); congestion-aware rows (ASTRA-sim's per-link FIFO store-and-forward backend, 1-D only)
with flowsim's flow model (max-min fair fluid sharing), as a point of comparison. Prints the
error distribution and a table per topology x collective x algorithm.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

import flowsim

BACKENDS = {"congestion_unaware": "analytical", "congestion_aware": "flow"}


def compare(validation: Path) -> dict[str, list[tuple[dict, float]]]:
    cases = validation / "astra_sim" / "cases.csv"
    out: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    with open(cases, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["status"] == "ok"]
    for row in rows:
        model = BACKENDS[row["backend"]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flowsim.FlowsimWarning)
            ds = flowsim.simulate_collective(cases.parent / row["network_cfg"],
                                             row["collective"], int(row["size_bytes"]),
                                             cases.parent / row["system_cfg"], model=model)
        out[row["backend"]].append((row, float(ds.time_ns)))
    return out


def main(argv: list[str]) -> int:
    default = Path(__file__).resolve().parents[2] / "shared" / "validation"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("validation", nargs="?", type=Path, default=default,
                        help="the validation folder (default: %(default)s)")
    validation = parser.parse_args(argv).validation
    start = time.perf_counter()
    results = compare(validation)
    for backend, pairs in results.items():
        rel = np.array([(t - float(r["sim_time_ns"])) / float(r["sim_time_ns"])
                        for r, t in pairs])
        print(f"\n## {backend} vs flowsim {BACKENDS[backend]} model: {len(pairs)} runs")
        print(f"relative error: median {np.median(rel):+.4%}, mean |err| "
              f"{np.mean(np.abs(rel)):.4%}, worst {rel[np.argmax(np.abs(rel))]:+.3%}, "
              f"within 1%: {np.mean(np.abs(rel) <= 0.01):.1%}")
        groups = defaultdict(list)
        for (row, _), e in zip(pairs, rel):
            groups[(row["topology"], row["npus_count"], row["collective"],
                    row["algorithm"])].append(e)
        print("| topology | NPUs | collective | algorithm | runs | flowsim/ASTRA-sim - 1 "
              "(min .. max) |")
        print("|---|---|---|---|---|---|")
        for (topo, npus, coll, alg), errs in sorted(groups.items()):
            print(f"| {topo} | {npus} | {coll} | {alg} | {len(errs)} | "
                  f"{min(errs):+.2%} .. {max(errs):+.2%} |")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
