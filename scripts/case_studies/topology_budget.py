"""Case study 2 (issue 7): 1-D to 4-D topologies of 1024 NPUs at an equal bandwidth budget.

    python scripts/case_studies/topology_budget.py [--out case_studies_out] [--quick]
                                                   [--jobs N] [--plot-only]

Every NPU gets the same bandwidth budget (``BUDGET_GBPS`` per NPU, flowsim GB/s = 2^30 B/s,
summed over its outgoing links in all dimensions), split over the dimensions of four shapes:

=======  ==========================================  ===================================
shape    dimensions (innermost first)                 transformer mapping
=======  ==========================================  ===================================
1D       Switch(1024)                                 (no whole dims of 8 for TP: skipped)
2D       FullyConnected(8) x Switch(128)              TP 8 on dim 0, DP 128 on dim 1
3D       FullyConnected(8) x Ring(8) x Switch(16)     TP on dim 0, DP on dims 1, 2
4D       Ring(2) x FullyConnected(4) x Ring(8) x      TP on dims 0, 1, DP on dims 2, 3
         Switch(16)
=======  ==========================================  ===================================

An NPU's share of a dimension becomes a link bandwidth through its outgoing links there
(Ring: 2, or 1 for a 2-NPU ring; FullyConnected(n): n - 1; Switch: 1). Splits: ``even``,
``inner`` (shares 2^(D-1-d): the scale-up dims get more) and ``outer`` (2^d). Algorithms:
ring on Ring, direct on FullyConnected, and on a Switch dim one of ``halvingDoubling``,
``direct`` or ``in-network`` (the switch reduces: ``in_network_reduction``);
``collective-optimization`` baseline or localBWAware; all-to-alls are ring on Ring, direct
elsewhere. 4 chunks per collective, 1 in flight per dimension (4 in the transformer's second
setting), LIFO, 10 ns injection, 500 ns per link.

Sweeps (flowsim's sweep machinery; one NetCDF each in ``--out``): ``topology_budget_allreduce``
(all-reduce, 1 MiB / 16 MiB / 256 MiB, every shape, split, switch algorithm and optimization),
``topology_budget_alltoall`` (the same sizes, every shape and split) and
``topology_budget_transformer`` (one training iteration of a GPT-style model with TP 8 x DP
128), each in the analytical and the flow model; then how each model ranks the configurations,
and the figures ``topology_budget_*.png``.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from flowsim._atomic import save_figure
from flowsim.results import write_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import Sweep, load_datasets, run_sweeps, study_entry  # noqa: E402  (beside this script)

BUDGET_GBPS = 400.0
LINK_LATENCY_NS = 500.0
#: shape name -> (topology per dim, NPUs per dim), innermost first
SHAPES = {
    "1D": (("Switch",), (1024,)),
    "2D": (("FullyConnected", "Switch"), (8, 128)),
    "3D": (("FullyConnected", "Ring", "Switch"), (8, 8, 16)),
    "4D": (("Ring", "FullyConnected", "Ring", "Switch"), (2, 4, 8, 16)),
}
SPLITS = ("even", "inner", "outer")
SWITCH_ALGORITHMS = ("halvingDoubling", "direct", "in-network")
TRANSFORMER = {"generator": "transformer", "layers": 4, "hidden": 8192, "sequence": 2048,
               "micro_batch": 1, "micro_batches": 4, "tp": 8, "dp": 128}


@dataclass(frozen=True)
class Grid:
    """Everything the study varies; :data:`FULL` is the study, :data:`QUICK` a smoke run."""

    shapes: dict = field(default_factory=lambda: dict(SHAPES))
    splits: tuple[str, ...] = SPLITS
    switch_algorithms: tuple[str, ...] = SWITCH_ALGORITHMS
    optimizations: tuple[str, ...] = ("baseline", "localBWAware")
    sizes: tuple[str, ...] = ("1MiB", "16MiB", "256MiB")
    models: tuple[str, ...] = ("analytical", "flow")
    chunks: int = 4
    transformer_active: tuple[int, ...] = (1, 4)
    budget_gbps: float = BUDGET_GBPS
    transformer: dict = field(default_factory=lambda: dict(TRANSFORMER))


FULL = Grid()
QUICK = Grid(splits=("even", "inner"), switch_algorithms=("halvingDoubling", "in-network"),
             optimizations=("localBWAware",), sizes=("16MiB",), transformer_active=(4,),
             shapes={k: v for k, v in SHAPES.items() if k != "1D"})


def links_per_npu(topology: str, npus: int) -> int:
    """Outgoing links of one NPU in one dimension."""
    if topology == "Ring":
        return 1 if npus == 2 else 2
    return npus - 1 if topology == "FullyConnected" else 1


def shares(split: str, ndims: int) -> np.ndarray:
    """Fraction of the per-NPU budget each dimension gets (sums to 1)."""
    weights = {"even": np.ones(ndims), "inner": 2.0 ** np.arange(ndims - 1, -1, -1),
               "outer": 2.0 ** np.arange(ndims)}[split]
    return weights / weights.sum()


def network(shape: str, split: str, grid: Grid = FULL, *, in_network: bool = False) -> dict:
    """The network mapping of ``shape`` with the budget split ``split``."""
    topology, npus = grid.shapes[shape]
    bandwidth = [grid.budget_gbps * s / links_per_npu(t, n)
                 for s, t, n in zip(shares(split, len(topology)), topology, npus)]
    return {"topology": list(topology), "npus_count": list(npus),
            "bandwidth": [float(b) for b in bandwidth],
            "latency": [LINK_LATENCY_NS] * len(topology),
            "in_network_reduction": [in_network and t == "Switch" for t in topology]}


def algorithms(shape: str, switch: str, grid: Grid = FULL) -> dict[str, list[str]]:
    """Per-dimension algorithms; ``switch`` is the all-reduce of Switch dims."""
    topology, _ = grid.shapes[shape]
    on_switch = "halvingDoubling" if switch == "in-network" else switch
    allreduce = [{"Ring": "ring", "FullyConnected": "direct", "Switch": on_switch}[t]
                 for t in topology]
    alltoall = ["ring" if t == "Ring" else "direct" for t in topology]
    return {"all-reduce-implementation": allreduce, "reduce-scatter-implementation": allreduce,
            "all-gather-implementation": allreduce, "all-to-all-implementation": alltoall}


def base_system(grid: Grid = FULL) -> dict:
    return {"preferred-dataset-splits": grid.chunks, "active-chunks-per-dimension": 1,
            "scheduling-policy": "LIFO", "endpoint-delay": 10,
            "collective-optimization": "localBWAware"}


def configs(grid: Grid = FULL, *, switch_algorithms: tuple[str, ...] | None = None,
            skip_1d: bool = False) -> list[dict]:
    """One row per (shape, split, switch algorithm): a 1-D shape has one split."""
    rows = []
    for shape, (topology, _) in grid.shapes.items():
        if skip_1d and len(topology) == 1:
            continue
        for split in grid.splits if len(topology) > 1 else grid.splits[:1]:
            for switch in switch_algorithms or grid.switch_algorithms:
                rows.append({"shape": shape, "split": split, "switch": switch,
                             "network": network(shape, split, grid,
                                                in_network=switch == "in-network"),
                             "algorithms": algorithms(shape, switch, grid)})
    return rows


def _sweep(name: str, rows: list[dict], grid: Grid, base: dict,
           axes: dict[str, list]) -> Sweep:
    models = list(grid.models)
    runs = [dict(r, model=m) for m in models for r in rows]
    group: dict[str, list] = {f"network.{k}": [r["network"][k] for r in runs]
                              for k in runs[0]["network"]}
    for key in runs[0]["algorithms"]:
        group[f"system.{key}"] = [r["algorithms"][key] for r in runs]
    group["model"] = [r["model"] for r in runs]
    spec = {"base": {"network": runs[0]["network"], "system": base_system(grid), **base},
            "axes": axes, "zip": {"run": group}}
    labels = [{k: r[k] for k in ("shape", "split", "switch", "model")} for r in runs]
    return Sweep(name, copy.deepcopy(spec), labels)


def allreduce_sweep(grid: Grid = FULL) -> Sweep:
    """All-reduce on every shape, split and switch algorithm, both optimizations."""
    return _sweep("allreduce", configs(grid), grid, {"collective": "all_reduce"},
                  {"system.collective-optimization": list(grid.optimizations),
                   "size": list(grid.sizes)})


def alltoall_sweep(grid: Grid = FULL) -> Sweep:
    """All-to-all on every shape and split (the switch's all-reduce does not matter)."""
    return _sweep("alltoall", configs(grid, switch_algorithms=grid.switch_algorithms[:1]),
                  grid, {"collective": "all_to_all"}, {"size": list(grid.sizes)})


def transformer_sweep(grid: Grid = FULL) -> Sweep:
    """One transformer iteration (TP x DP) on every multi-dimensional configuration, with
    1 and 4 chunks in flight per dimension."""
    return _sweep("transformer", configs(grid, skip_1d=True), grid,
                  {"workload": dict(grid.transformer), "iterations": 1},
                  {"system.active-chunks-per-dimension": list(grid.transformer_active)})


SWEEPS = (allreduce_sweep, alltoall_sweep, transformer_sweep)


# ------------------------------------------------------------------------------ running
def tidy(ds: xr.Dataset, sweep: Sweep) -> xr.Dataset:
    """Unfold ``run`` into shape x split x switch x model (combinations not run are NaN)."""
    ds = ds.drop_vars([c for c in ds.coords if str(c).startswith("run__")])
    keys = ("shape", "split", "switch", "model")
    ds = ds.assign_coords({k: ("run", [r[k] for r in sweep.rows]) for k in keys})
    out = ds.set_index(run=list(keys)).unstack("run")
    out = out.reindex(shape=[s for s in SHAPES if s in out["shape"].values],
                      split=[s for s in SPLITS if s in out.split.values],
                      switch=[s for s in SWITCH_ALGORITHMS if s in out.switch.values])
    out["error"] = out.error.fillna("").astype(str)
    if sweep.name == "alltoall":    # the switch's all-reduce algorithm plays no part
        out = out.squeeze("switch", drop=True)
    return out


def run_study(out: Path, grid: Grid = FULL, *, jobs: int | None = None,
              progress: bool = True, figures: bool = True) -> dict[str, xr.Dataset]:
    """Run the sweeps, write ``topology_budget_<name>.nc``, the ranking table and figures."""
    results = run_sweeps(out, "topology_budget", SWEEPS, grid, tidy, jobs=jobs, progress=progress)
    results["rankings"] = rankings(results)
    write_dataset(results["rankings"], out / "topology_budget_rankings.nc")
    if figures:
        plot_all(results, out)
    return results


# ------------------------------------------------------------------------------ rankings
def _cases(results: dict[str, xr.Dataset]) -> list[tuple[str, xr.DataArray]]:
    """The comparisons ranked: per collective, size and optimization, and per transformer
    setting, the configurations (shape, split, switch algorithm) that ran."""
    cases = []
    ar = results["allreduce"]
    for opt in ar.system_collective_optimization.values:
        for size in ar["size"].values:
            cases.append((f"all-reduce {_mib(size)}, {opt}",
                          ar.time_ns.sel(system_collective_optimization=opt, size=size)))
    a2a = results["alltoall"]
    for size in a2a["size"].values:
        cases.append((f"all-to-all {_mib(size)}", a2a.time_ns.sel(size=size)))
    tr = results["transformer"]
    for active in tr.system_active_chunks_per_dimension.values:
        cases.append((f"transformer, {active} chunk(s) in flight",
                      tr.time_ns.sel(system_active_chunks_per_dimension=active)))
    return cases


def _mib(size: Any) -> str:
    return f"{int(size) / 2**20:g} MiB"


def rankings(results: dict[str, xr.Dataset]) -> xr.Dataset:
    """How the analytical and the flow model rank the configurations of every case: Kendall's
    tau, whether they pick the same best configuration, and the pairs they order
    differently (a pair counts when the flow model separates it by more than 1%)."""
    from scipy.stats import kendalltau

    names, taus, same_best, best_a, best_f, swapped, worst = [], [], [], [], [], [], []
    for name, times in _cases(results):
        flat = times.stack(config=[d for d in times.dims if d != "model"])
        ok = np.isfinite(flat.sel(model="analytical")) & np.isfinite(flat.sel(model="flow"))
        flat = flat.isel(config=np.flatnonzero(ok.values))
        a = flat.sel(model="analytical").values
        f = flat.sel(model="flow").values
        labels = ["/".join(map(str, c)) for c in flat.config.values]
        tau = kendalltau(a, f).statistic if len(a) > 1 else 1.0
        pairs = [(i, j) for i in range(len(a)) for j in range(len(a))
                 if a[i] < a[j] and f[i] > 1.01 * f[j]]
        names.append(name)
        taus.append(float(tau))
        best_a.append(labels[int(np.argmin(a))])
        best_f.append(labels[int(np.argmin(f))])
        same_best.append(best_a[-1] == best_f[-1])
        swapped.append(len(pairs))
        if pairs:
            i, j = max(pairs, key=lambda p: f[p[0]] / f[p[1]])
            worst.append(f"{labels[i]} < {labels[j]} analytical ({a[i] / 1e3:.1f} < "
                         f"{a[j] / 1e3:.1f} us), flow {f[i] / 1e3:.1f} > {f[j] / 1e3:.1f} us")
        else:
            worst.append("")
    return xr.Dataset(
        {"kendall_tau": ("case", taus), "same_best": ("case", same_best),
         "best_analytical": ("case", best_a), "best_flow": ("case", best_f),
         "pairs_reordered": ("case", swapped), "largest_reordering": ("case", worst)},
        coords={"case": names})


# ------------------------------------------------------------------------------ figures
SHAPE_COLORS = {"1D": "tab:gray", "2D": "tab:blue", "3D": "tab:green", "4D": "tab:purple"}


def plot_all(results: dict[str, xr.Dataset], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    return [plot_budget(results, out), plot_allreduce_variants(results["allreduce"], out),
            plot_ranking(results, out), plot_transformer(results["transformer"], out)]


def _config_bars(ax: Any, times: xr.DataArray, title: str, unit: float, ylabel: str) -> None:
    """Bars of the flow model, analytical as black ticks, over (shape, split)."""
    k, ticks = 0, []
    for shape in times["shape"].values:
        for split in times.split.values:
            t = times.sel(shape=shape, split=split)
            if not np.isfinite(t).all():
                continue
            ax.bar(k, float(t.sel(model="flow")) / unit, color=SHAPE_COLORS[str(shape)],
                   alpha={"even": 1.0, "inner": 0.7, "outer": 0.4}[str(split)])
            ax.plot(k, float(t.sel(model="analytical")) / unit, "k_", ms=12)
            ticks.append(f"{shape}\n{split}" if len(times.split) > 1 else str(shape))
            k += 1
    ax.set_xticks(range(k), ticks, fontsize=6)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def plot_budget(results: dict[str, xr.Dataset], out: Path) -> Path:
    import matplotlib.pyplot as plt

    ar, a2a = results["allreduce"], results["alltoall"]
    sizes = list(ar["size"].values)
    fig, axes = plt.subplots(2, len(sizes), figsize=(4.6 * len(sizes), 7), squeeze=False)
    opt = ar.system_collective_optimization.values[-1]
    for j, size in enumerate(sizes):
        _config_bars(axes[0][j], ar.time_ns.sel(size=size, switch=ar.switch.values[0],
                                                system_collective_optimization=opt),
                     f"all-reduce {_mib(size)} ({opt}, {ar.switch.values[0]} on switches)",
                     1e3, "us")
        _config_bars(axes[1][j], a2a.time_ns.sel(size=size),
                     f"all-to-all {_mib(size)}", 1e3, "us")
    fig.suptitle("the same bandwidth per NPU split over the dims (bars: flow model, ticks: "
                 "analytical; shade: even / inner / outer split)", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "topology_budget_collectives.png")


def plot_allreduce_variants(ar: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    size = ar["size"].values[-1]
    t = ar.time_ns.sel(size=size, split=ar.split.values[0])
    fig, ax = plt.subplots(figsize=(9, 4))
    k, ticks = 0, []
    for shape in t["shape"].values:
        for opt in t.system_collective_optimization.values:
            for switch in t.switch.values:
                v = t.sel(shape=shape, system_collective_optimization=opt, switch=switch)
                if not np.isfinite(v).all():
                    continue
                ax.bar(k, float(v.sel(model="flow")) / 1e3, color=SHAPE_COLORS[str(shape)],
                       alpha=0.5 if opt == "baseline" else 1.0,
                       hatch={"halvingDoubling": "", "direct": "//", "in-network": ".."}[
                           str(switch)])
                ax.plot(k, float(v.sel(model="analytical")) / 1e3, "k_", ms=10)
                ticks.append(f"{shape} {'base' if opt == 'baseline' else 'lBWA'}\n"
                             f"{'HD' if switch == 'halvingDoubling' else switch}")
                k += 1
    ax.set_xticks(range(k), ticks, fontsize=5.5, rotation=90)
    ax.set_yscale("log")
    ax.set_ylabel("us")
    ax.set_title(f"all-reduce {_mib(size)}, {ar.split.values[0]} split: baseline vs "
                 f"localBWAware, switch dims halving-doubling / direct / in-network "
                 f"(bars flow, ticks analytical)", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out / "topology_budget_allreduce_variants.png")


def plot_ranking(results: dict[str, xr.Dataset], out: Path) -> Path:
    """Bump charts: each configuration's rank under the analytical model (left) and the
    flow model (right), for the cases where the two disagree most."""
    import matplotlib.pyplot as plt

    cases = _cases(results)
    table = results["rankings"]
    taus = table.kendall_tau.values
    order = []      # the case each family (all-reduce, all-to-all, transformer) ranks worst
    for family in ("all-reduce", "all-to-all", "transformer"):
        members = [i for i, (name, _) in enumerate(cases) if name.startswith(family)]
        if members:
            order.append(min(members, key=lambda i: taus[i]))
    fig, axes = plt.subplots(1, len(order), figsize=(4.2 * len(order), 5.5), squeeze=False)
    for ax, c in zip(axes[0], order):
        name, times = cases[c]
        flat = times.stack(config=[d for d in times.dims if d != "model"])
        ok = np.isfinite(flat.sel(model="analytical")) & np.isfinite(flat.sel(model="flow"))
        flat = flat.isel(config=np.flatnonzero(ok.values))
        ra = np.argsort(np.argsort(flat.sel(model="analytical").values))
        rf = np.argsort(np.argsort(flat.sel(model="flow").values))
        for i, config in enumerate(flat.config.values):
            moved = ra[i] != rf[i]
            ax.plot([0, 1], [ra[i], rf[i]], "-o", ms=3, lw=1.5 if moved else 0.6,
                    color=SHAPE_COLORS[str(config[0])], alpha=1.0 if moved else 0.35)
            ax.text(1.04, rf[i], "/".join(map(str, config)), fontsize=4.5, va="center")
        ax.set_xlim(-0.1, 1.8)
        ax.invert_yaxis()
        ax.set_xticks([0, 1], ["analytical", "flow"])
        ax.set_ylabel("rank (0 = fastest)", fontsize=8)
        ax.set_title(f"{name}\nKendall tau {float(table.kendall_tau[c]):.2f}", fontsize=8)
    fig.tight_layout()
    return _save(fig, out / "topology_budget_ranking.png")


def plot_transformer(tr: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    actives = list(tr.system_active_chunks_per_dimension.values)
    fig, axes = plt.subplots(len(actives), 1, figsize=(10, 3.4 * len(actives)),
                             squeeze=False)
    for ax, active in zip(axes[:, 0], actives):
        t = tr.time_ns.sel(system_active_chunks_per_dimension=active)
        k, ticks = 0, []
        for shape in t["shape"].values:
            for split in t.split.values:
                for switch in t.switch.values:
                    v = t.sel(shape=shape, split=split, switch=switch)
                    if not np.isfinite(v).all():
                        continue
                    ax.bar(k, float(v.sel(model="flow")) / 1e6, color=SHAPE_COLORS[str(shape)],
                           alpha={"even": 1.0, "inner": 0.7, "outer": 0.4}[str(split)],
                           hatch={"halvingDoubling": "", "direct": "//", "in-network": ".."}[
                               str(switch)])
                    ax.plot(k, float(v.sel(model="analytical")) / 1e6, "k_", ms=8)
                    ticks.append(f"{shape} {split}\n"
                                 f"{'HD' if switch == 'halvingDoubling' else switch}")
                    k += 1
        low = float(t.min()) / 1e6
        ax.set_ylim(low * 0.95, float(t.max()) / 1e6 * 1.03)
        ax.set_xticks(range(k), ticks, fontsize=5.5, rotation=90)
        ax.set_ylabel("iteration time (ms)")
        ax.set_title(f"transformer ({_describe(tr)}), {active} chunk(s) in flight per dim: "
                     f"bars flow, ticks analytical", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out / "topology_budget_transformer.png")


def _describe(tr: xr.Dataset) -> str:
    """``4 layers, hidden 8192, TP 8 x DP 128`` from the sweep spec stored with the result."""
    import json

    w = json.loads(tr.attrs["spec_json"])["base"]["workload"]
    return f"{w['layers']} layers, hidden {w['hidden']}, TP {w['tp']} x DP {w['dp']}"


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    save_figure(fig, path)
    plt.close(fig)
    return path


def summary(results: dict[str, xr.Dataset]) -> str:
    table = results["rankings"]
    lines = ["how the two models rank the configurations:"]
    for i, case in enumerate(table.case.values):
        row = table.isel(case=i)
        lines.append(f"  {case:38s} tau {float(row.kendall_tau):5.2f}  best analytical "
                     f"{row.best_analytical.item():24s} best flow {row.best_flow.item():24s} "
                     f"pairs reordered {int(row.pairs_reordered)}")
    return "\n".join(lines)


def load_results(out: Path) -> dict[str, xr.Dataset]:
    """The datasets :func:`run_study` wrote to ``out``."""
    names = [build(FULL).name for build in SWEEPS] + ["rankings"]
    return load_datasets(out, "topology_budget", names)


main = study_entry(__doc__, run_study, load_results, plot_all, summary, FULL, QUICK)


if __name__ == "__main__":
    sys.exit(main())
