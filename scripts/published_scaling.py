"""The same run on more GPUs: how the published step grows with the GPU count, and flowsim's.

    python scripts/published_scaling.py [--markdown validation/published/scaling.md]
    python scripts/published_scaling.py --spread 0.01

Pairs of published rows that differ only in their data-parallel size (same source, GPU,
model, layout, precision and settings, and the same sequences per data-parallel replica, so
the same work per GPU) are weak-scaling measurements: a perfectly scaling run takes the same
step at both sizes. For each such group this script takes its smallest and its largest run
and compares the growth of the published step with the growth of flowsim's recorded
prediction (``validation/published/results.csv``). It reads the record; it sets nothing.
``--spread S`` is a what-if: the pairs simulated again with per-GPU speeds of standard
deviation ``S`` (flowsim's ``speed=``), the slowest GPU of each run setting its pace.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict

import _published_record as record
import numpy as np
import validate_published as vp

#: the columns a weak-scaling pair may differ in (the rest must be equal, but the node count
#: among a row's ``cluster_overrides``)
SIZE_COLUMNS = ("run", "gpus", "dp", "global_batch", "published", "citation", "notes")
#: the largest ``--spread`` taken: every speed stays positive up to 10^5 GPUs (4.4 deviations)
MAX_SPREAD = 0.2


def _publication(row: dict[str, str]) -> tuple[str, ...]:
    """The publication a row's measurement comes from where one file gathers several: an
    MLPerf Training round and its submitter (the owner of the results folder the row
    cites); nothing for a file of one publication."""
    version = re.search(r"training_results_v([\d.]+)", row["citation"])
    owner = re.search(r"(\S+?)/results/", row["citation"])
    return (version.group(1), owner.group(1)) if version and owner else ()


def pairs() -> list[tuple[dict[str, str], dict[str, str], float, float]]:
    """``(smallest, largest, published growth, predicted growth)`` per group of rows with the
    same work per GPU at two sizes or more; growths as fractions of the smaller step."""
    recorded = record.recorded()
    groups: dict[tuple, list[dict[str, str]]] = defaultdict(list)
    for row in vp.rows():
        per_replica = int(row["global_batch"]) // int(row["dp"])
        same = {k: v for k, v in row.items() if k not in SIZE_COLUMNS}
        if same.get("cluster_overrides"):   # its node count is the size; the rest must agree
            same["cluster_overrides"] = ";".join(
                item for item in same["cluster_overrides"].split(";")
                if not item.startswith("nodes="))
        key = tuple(sorted(same.items()))
        groups[key, per_replica, _publication(row)].append(row)
    out = []
    for rows in groups.values():
        rows.sort(key=lambda r: int(r["gpus"]))
        small, large = rows[0], rows[-1]
        if small["gpus"] == large["gpus"]:
            continue
        growth = [float(recorded[large["run"]][c]) / float(recorded[small["run"]][c]) - 1
                  for c in ("published_s", "predicted_s")]
        out.append((small, large, *growth))
    return sorted(out, key=lambda p: (p[1]["file"], p[1]["run"]))


def markdown(found: list[tuple[dict[str, str], dict[str, str], float, float]]) -> str:
    """The pairs as a Markdown table, and a line of medians."""
    lines = ["| larger run | GPUs | published step grows | flowsim's grows | source |",
             "|---|---|---:|---:|---|"]
    for small, large, published, predicted in found:
        lines.append(f"| {large['run']} | {int(small['gpus']):,} → {int(large['gpus']):,} | "
                     f"{_percent(published)} | {_percent(predicted)} | `{large['file']}` |")
    grew = sum(p > q for _, _, p, q in found)
    lines.append("")
    lines.append(f"{len(found)} pairs: the published step grows by "
                 f"{_percent(statistics.median(p for _, _, p, _ in found))} at the median, "
                 f"flowsim's by {_percent(statistics.median(q for *_, q in found))}; "
                 f"the published growth is the larger in {grew} of {len(found)}.")
    return "\n".join(lines) + "\n"


def _percent(growth: float) -> str:
    """A signed percentage with one decimal (no "-0.0%")."""
    text = f"{100 * growth:+.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def spread_speeds(npus: int, spread: float, seed: int = 0) -> np.ndarray:
    """Per-GPU compute speeds ``1 + spread z``, ``z`` the standard normal quantiles at
    ``(i + 0.5) / npus`` in a seeded random order: a spread of ``spread`` (standard
    deviation) with its slowest GPU about where the expected slowest of ``npus`` would be."""
    from scipy.stats import norm

    order = np.random.default_rng(seed).permutation(npus)
    return 1.0 + spread * norm.ppf((order + 0.5) / npus)


def spread_growths(spread: float) -> list[tuple[str, float, float, float]]:
    """``(larger run, published, recorded, with the spread)`` growth of every pair the
    analytical model predicts, each run simulated again with :func:`spread_speeds`."""
    out = []
    for small, large, published, predicted in pairs():
        if vp.model_for(large) != "analytical":
            continue
        small_s, large_s = (vp.predict(row, "analytical",
                                       speed=spread_speeds(int(row["gpus"]), spread))
                            for row in (small, large))
        out.append((large["run"], published, predicted, large_s / small_s - 1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="write the table here instead of printing it")
    parser.add_argument("--spread", type=float,
                        help="what-if: simulate the analytical model's pairs again with this "
                             "standard deviation of per-GPU speed (0.01: 1%%) and print "
                             "their growths beside the published ones")
    args = parser.parse_args(argv)
    if args.spread is not None and not 0 <= args.spread <= MAX_SPREAD:
        parser.error(f"argument --spread: expected a standard deviation from 0 to "
                     f"{MAX_SPREAD} (0.01: 1%), found {args.spread}")
    if args.spread is not None:
        found = spread_growths(args.spread)
        for run, published, predicted, spread in found:
            print(f"{run:45} published {_percent(published):>7} flowsim "
                  f"{_percent(predicted):>7} with the spread {_percent(spread):>7}")
        columns = list(zip(*[g[1:] for g in found]))
        medians = [_percent(statistics.median(c)) for c in columns]
        gaps = [statistics.median(p - q for p, q in zip(columns[0], c)) for c in columns[1:]]
        print(f"{len(found)} pairs, medians: published {medians[0]}, flowsim {medians[1]}, "
              f"with the spread {medians[2]}; median gap {100 * gaps[0]:.1f} -> "
              f"{100 * gaps[1]:.1f} points")
        return 0
    table = markdown(pairs())
    if args.markdown:
        from flowsim._atomic import write_text_atomic

        write_text_atomic(args.markdown, table)
    else:
        print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
