"""What the two case-study scripts share: their command line and reading their results back."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import xarray as xr

import flowsim


@dataclass(frozen=True)
class Sweep:
    """A sweep spec and what labels its ``run`` axis (and, for collectives, its ``op`` axis)."""

    name: str
    spec: dict
    rows: list[dict]
    ops: list | None = None


def load_datasets(out: Path, prefix: str, names: Sequence[str]) -> dict[str, xr.Dataset]:
    """The NetCDF files ``<prefix>_<name>.nc`` a study wrote to ``out``, loaded."""
    results = {}
    for name in names:
        with xr.open_dataset(out / f"{prefix}_{name}.nc") as ds:
            results[name] = ds.load()
    return results


def study_main(argv: list[str] | None, *, description: str,
               run: Callable[[Path, object, int | None], dict], load: Callable[[Path], dict],
               plot: Callable[[dict, Path], None], summary: Callable[[dict], str],
               full: object, quick: object) -> int:
    """``--out``, ``--quick``, ``--jobs`` and ``--plot-only``, then run, plot and summarise."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default="case_studies_out",
                        help="output folder (default: case_studies_out; pass docs/case_studies "
                             "to refresh the documentation figures)")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (smoke test)")
    parser.add_argument("--jobs", type=int, default=None, help="processes (default: all)")
    parser.add_argument("--plot-only", action="store_true",
                        help="redraw the figures from the NetCDF files in --out")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out)
    if args.plot_only:
        results = load(out)
        plot(results, out)
        print(summary(results))
        return 0
    flowsim.warmup()
    results = run(out, quick if args.quick else full, args.jobs)
    print(summary(results))
    print(f"wall time {time.perf_counter() - start:.0f} s; results in {args.out}")
    return 0


def study_entry(doc: str, run_study: Callable, load: Callable[[Path], dict],
                plot: Callable[[dict, Path], None], summary: Callable[[dict], str],
                full: object, quick: object) -> Callable[[list[str] | None], int]:
    """A study script's ``main``: its docstring's first line as the description, its
    ``run_study(out, grid, jobs=...)``, loaders, figures, summary and grids."""
    def main(argv: list[str] | None = None) -> int:
        return study_main(argv, description=doc.splitlines()[0],
                          run=lambda out, grid, jobs: run_study(out, grid, jobs=jobs),
                          load=load, plot=plot, summary=summary, full=full, quick=quick)
    return main


def run_sweeps(out: Path, prefix: str, builders: Sequence[Callable], grid: object,
               tidy: Callable, *, jobs: int | None, progress: bool) -> dict[str, xr.Dataset]:
    """Run each sweep a builder makes of ``grid``, tidy it and write ``<prefix>_<name>.nc``
    (a rerun resumes from the sweep's part files)."""
    from flowsim.results import write_dataset

    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for build in builders:
        sweep = build(grid)
        start = time.perf_counter()
        path = out / f"{prefix}_{sweep.name}.nc"
        raw = flowsim.sweep(sweep.spec, path, jobs=jobs, progress=progress)
        ds = tidy(raw, sweep)
        write_dataset(ds, path)
        results[sweep.name] = ds
        failed = int((ds.error != "").sum())
        print(f"{sweep.name}: {raw.time_ns.size} points in "
              f"{time.perf_counter() - start:.1f} s" + (f", {failed} failed" if failed else ""),
              flush=True)
    return results
