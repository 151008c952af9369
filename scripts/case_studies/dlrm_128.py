"""Case study 1 (issue 7): DLRM training on 128 GPUs, flat vs hierarchical networks.

    python scripts/case_studies/dlrm_128.py [--out case_studies_out] [--quick] [--jobs N]
                                            [--plot-only]

DLRM (the ``dlrm`` generator's defaults: the seed study's model, 512 samples per GPU, 60
TFLOP/s and 900 GB/s per GPU) on four 128-GPU systems, link latency 0.5 us:

* ``Flat100G`` / ``Flat800G``: every GPU on one switch at 100 / 800 Gb/s per GPU;
* ``Hier``: 16 nodes of 8 GPUs, a 150 GB/s NVSwitch-class scale-up switch per node and a
  100 Gb/s scale-out switch across nodes;
* ``HierOpt``: ``Hier`` with the scale-out tuned: the same 100 Gb/s links, but the scale-out
  switch reduces in the network (SHARP-like), so an all-reduce crosses each NIC once each way.

The all-reduce algorithm of the scale-out dimension is ``doubleBinaryTree`` or ``direct``
(all-to-all based: reduce-scatter and all-gather as direct exchanges); inside a node it is
``direct``, all-to-alls are ``direct``, multi-dimensional collectives are ``localBWAware``.
Base system: 32 chunks per collective, 64 chunks in flight per dimension, LIFO, 1 us injection
latency (``endpoint-delay``, ns per message hand-off). Sweeps (flowsim's sweep machinery,
processes and a progress bar; one NetCDF each in ``--out``):

``dlrm_128_collectives.nc``   raw latency of every distinct DLRM collective, both models
``dlrm_128_iteration.nc``     2 iterations end to end: time, compute, exposed communication
``dlrm_128_coll_injection.nc``, ``dlrm_128_coll_chunks.nc``  collective latency against the
                              injection latency, chunks and chunks in flight
``dlrm_128_injection.nc``, ``dlrm_128_scheduling.nc``  iteration time against the injection
                              latency; against chunks in flight and LIFO / FIFO

and the figures ``dlrm_128_*.png``. The flow model of a flat network with the direct all-reduce
simulates about a million flows per all-reduce (about a minute per DLRM run), so the
end-to-end sensitivity sweeps run it with the analytical model only (``FLOW_SKIP``).
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

import flowsim
from flowsim._atomic import save_figure
from flowsim.results import write_dataset
from flowsim.workload.generators import DLRMSpec, parse_dlrm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import Sweep, load_datasets, run_sweeps, study_entry  # noqa: E402  (beside this script)

#: flowsim's "GB/s" is 2^30 bytes/s (ASTRA-sim's unit)
GIB = 2**30
LINK_LATENCY_NS = 500.0
#: NVLink 2 of a V100: 6 links of 25 GB/s per direction (10^9 B/s), in flowsim's GB/s
NVLINK_GBPS = 150e9 / GIB
SYSTEM_NAMES = ("Flat100G", "Flat800G", "Hier", "HierOpt")
#: runs the flow model leaves out of the end-to-end sensitivity sweeps (cost, see above)
FLOW_SKIP = frozenset({("Flat100G", "direct"), ("Flat800G", "direct")})


def gbit(gbps: float) -> float:
    """A link rate in Gb/s (10^9 bit/s) as flowsim GB/s (2^30 B/s): 100 -> 11.64."""
    return gbps * 1e9 / 8 / GIB


@dataclass(frozen=True)
class Grid:
    """Everything the study varies; :data:`FULL` is the study, :data:`QUICK` a smoke run."""

    nodes: int = 16
    gpus_per_node: int = 8
    algorithms: tuple[str, ...] = ("doubleBinaryTree", "direct")
    models: tuple[str, ...] = ("analytical", "flow")
    splits: int = 32                      # base: chunks per collective
    active: int = 64                      # base: chunks in flight per dimension
    injection_ns: float = 1000.0          # base: endpoint-delay
    injection_sweep_ns: tuple[float, ...] = (10.0, 1e3, 1e4, 1e5)
    chunk_sweep_splits: tuple[int, ...] = (32, 128)
    chunk_sweep_active: tuple[int, ...] = (1, 4, 16, 64)
    #: (chunks in flight, scheduling policy) of the end-to-end scheduling sweep
    scheduling: tuple[tuple[int, str], ...] = ((4, "LIFO"), (64, "LIFO"), (128, "LIFO"),
                                               (64, "FIFO"))
    policies: tuple[str, ...] = ("LIFO", "FIFO")    # of the per-layer breakdown
    iterations: int = 2
    workload: dict = field(default_factory=lambda: {"generator": "dlrm"})
    flow_skip: frozenset = FLOW_SKIP


FULL = Grid()
QUICK = Grid(algorithms=("direct",), splits=4, active=4, injection_sweep_ns=(1e3, 1e5),
             chunk_sweep_splits=(4,), chunk_sweep_active=(1, 4),
             scheduling=((4, "LIFO"), (4, "FIFO")),
             iterations=1)


# ----------------------------------------------------------------------------- configurations
def systems(grid: Grid = FULL) -> dict[str, dict]:
    """The four networks (flowsim network mappings), all with the same keys."""
    n = grid.nodes * grid.gpus_per_node

    def flat(gbps: float) -> dict:
        return {"topology": ["Switch"], "npus_count": [n], "bandwidth": [gbit(gbps)],
                "latency": [LINK_LATENCY_NS], "in_network_reduction": [False]}

    def hier(reduce_in_network: bool) -> dict:
        return {"topology": ["Switch", "Switch"], "npus_count": [grid.gpus_per_node, grid.nodes],
                "bandwidth": [NVLINK_GBPS, gbit(100)], "latency": [LINK_LATENCY_NS] * 2,
                "in_network_reduction": [False, reduce_in_network]}

    return {"Flat100G": flat(100), "Flat800G": flat(800), "Hier": hier(False),
            "HierOpt": hier(True)}


def base_system(grid: Grid = FULL) -> dict:
    """System settings shared by every run (algorithms come with each run)."""
    return {"preferred-dataset-splits": grid.splits,
            "active-chunks-per-dimension": grid.active, "scheduling-policy": "LIFO",
            "endpoint-delay": grid.injection_ns, "collective-optimization": "localBWAware"}


def runs(grid: Grid, models: tuple[str, ...] | None = None,
         skip: frozenset = frozenset()) -> list[dict]:
    """One row per (system, all-reduce algorithm, model), ``skip`` leaving out flow runs."""
    rows = []
    for model in models or grid.models:
        for name, net in systems(grid).items():
            for algorithm in grid.algorithms:
                if model == "flow" and (name, algorithm) in skip:
                    continue
                ndims = len(net["topology"])
                rows.append({"system": name, "allreduce": algorithm, "model": model,
                             "network": net,
                             "all_reduce": ["direct"] * (ndims - 1) + [algorithm],
                             "all_to_all": ["direct"] * ndims})
    return rows


def _run_zip(rows: list[dict]) -> dict[str, list]:
    """The zip group that sets each row's network, algorithms and model."""
    group: dict[str, list] = {f"network.{key}": [r["network"][key] for r in rows]
                              for key in rows[0]["network"]}
    group["system.all-reduce-implementation"] = [r["all_reduce"] for r in rows]
    group["system.all-to-all-implementation"] = [r["all_to_all"] for r in rows]
    group["model"] = [r["model"] for r in rows]
    return group


def dlrm_collectives(workload: dict | None = None) -> list[tuple[str, str, int, int]]:
    """Distinct collectives of one DLRM iteration: ``(label, collective, bytes per NPU,
    count per iteration)``, from the generator's own sizes."""
    params = {k: v for k, v in (workload or {"generator": "dlrm"}).items() if k != "generator"}
    spec: DLRMSpec = parse_dlrm(params, "workload")
    out = [("embedding a2a", "all_to_all", spec.all_to_all_bytes, 2)]
    sizes: dict[int, list[str]] = {}
    for which in ("bottom", "top"):
        for i, (n_in, n_out) in enumerate(spec.mlp_shapes(which)):
            sizes.setdefault((n_in * n_out + n_out) * spec.dtype_bytes, []).append(
                f"{which}{i}")
    for size, layers in sorted(sizes.items(), reverse=True):
        name = layers[0] if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"
        out.append((f"AR {name}", "all_reduce", size, len(layers)))
    return out


def _sweep(name: str, rows: list[dict], grid: Grid, *, ops: list | None = None,
           axes: dict[str, list] | None = None, zips: dict[str, dict] | None = None) -> Sweep:
    base: dict[str, Any] = {"network": rows[0]["network"], "system": base_system(grid)}
    zips = {"run": _run_zip(rows), **(zips or {})}
    if ops is None:
        base.update(workload=dict(grid.workload), iterations=grid.iterations)
    else:
        base.update(collective=ops[0][1], size=ops[0][2])
        zips["op"] = {"collective": [o[1] for o in ops], "size": [o[2] for o in ops]}
    spec = copy.deepcopy({"base": base, "axes": dict(axes or {}), "zip": zips})
    return Sweep(name, spec, rows, ops)


def _two_ops(grid: Grid) -> list:
    ops = dlrm_collectives(grid.workload)
    return [ops[0], max(ops[1:], key=lambda o: o[3])]   # the a2a, the most frequent AR


def collectives_sweep(grid: Grid = FULL) -> Sweep:
    """Raw latency of every distinct DLRM collective at the base settings."""
    return _sweep("collectives", runs(grid), grid, ops=dlrm_collectives(grid.workload))


def coll_injection_sweep(grid: Grid = FULL) -> Sweep:
    """The embedding all-to-all and the top MLP's all-reduce against injection latency."""
    return _sweep("coll_injection", runs(grid), grid, ops=_two_ops(grid),
                  axes={"system.endpoint-delay": list(grid.injection_sweep_ns)})


def coll_chunks_sweep(grid: Grid = FULL) -> Sweep:
    """The same two collectives against chunks per collective and chunks in flight."""
    return _sweep("coll_chunks", runs(grid), grid, ops=_two_ops(grid),
                  axes={"system.preferred-dataset-splits": list(grid.chunk_sweep_splits),
                        "system.active-chunks-per-dimension": list(grid.chunk_sweep_active)})


def iteration_sweep(grid: Grid = FULL) -> Sweep:
    """Every (system, algorithm, model): ``grid.iterations`` DLRM iterations end to end."""
    return _sweep("iteration", runs(grid), grid)


def injection_sweep(grid: Grid = FULL) -> Sweep:
    """Iteration time against injection latency (flow runs without ``grid.flow_skip``)."""
    return _sweep("injection", runs(grid, skip=grid.flow_skip), grid,
                  axes={"system.endpoint-delay": list(grid.injection_sweep_ns)})


def scheduling_sweep(grid: Grid = FULL) -> Sweep:
    """Iteration time against chunks in flight and LIFO / FIFO (``grid.scheduling``; flow
    model, runs without ``grid.flow_skip``)."""
    setting = {"system.active-chunks-per-dimension": [a for a, _ in grid.scheduling],
               "system.scheduling-policy": [p for _, p in grid.scheduling]}
    return _sweep("scheduling", runs(grid, models=("flow",), skip=grid.flow_skip), grid,
                  zips={"setting": setting})


SWEEPS = (collectives_sweep, coll_injection_sweep, coll_chunks_sweep, iteration_sweep,
          injection_sweep, scheduling_sweep)


# ------------------------------------------------------------------------------ running
def tidy(ds: xr.Dataset, sweep: Sweep) -> xr.Dataset:
    """Unfold the sweep's ``run`` axis into ``system`` x ``allreduce`` x ``model`` (runs
    left out are NaN) and label ``op`` by collective."""
    ds = ds.drop_vars([c for c in ds.coords if str(c).startswith(("run__", "op__"))])
    rows = sweep.rows
    ds = ds.assign_coords(system=("run", [r["system"] for r in rows]),
                          allreduce=("run", [r["allreduce"] for r in rows]),
                          model=("run", [r["model"] for r in rows]))
    out = ds.set_index(run=["system", "allreduce", "model"]).unstack("run")
    out = out.reindex(system=[s for s in SYSTEM_NAMES if s in out.system.values])
    out["error"] = out.error.fillna("").astype(str)
    if sweep.ops is not None:
        ops = sweep.ops
        out = out.assign_coords(op=[o[0] for o in ops], collective=("op", [o[1] for o in ops]),
                                bytes_per_npu=("op", [o[2] for o in ops]),
                                per_iteration=("op", [o[3] for o in ops]))
    return out


def run_study(out: Path, grid: Grid = FULL, *, jobs: int | None = None,
              progress: bool = True, figures: bool = True) -> dict[str, xr.Dataset]:
    """Run every sweep of the study, write ``dlrm_128_<name>.nc`` (and the figures)."""
    results = run_sweeps(out, "dlrm_128", SWEEPS, grid, tidy, jobs=jobs, progress=progress)
    results["layers"] = layer_breakdown(grid, jobs=jobs)
    write_dataset(results["layers"], out / "dlrm_128_layers.nc")
    if figures:
        plot_all(results, out)
    return results


def layer_breakdown(grid: Grid, jobs: int | None = None) -> xr.Dataset:
    """Per-layer exposed communication of the hierarchical systems (direct all-reduce, flow
    model) under LIFO and FIFO, from :func:`flowsim.simulate`'s per-layer outputs."""
    from concurrent.futures import ProcessPoolExecutor

    nets = systems(grid)
    cases = [(name, policy) for name in ("Hier", "HierOpt") for policy in grid.policies]
    args = [(nets[name], policy, grid) for name, policy in cases]
    workers = min(jobs or os.cpu_count() or 1, len(args))
    if workers <= 1:
        parts = [_layer_run(a) for a in args]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(_layer_run, args))
    ds = xr.concat(parts, dim="case")
    return ds.assign_coords(system=("case", [c[0] for c in cases]),
                            policy=("case", [c[1] for c in cases]))


def _layer_run(args: tuple) -> xr.Dataset:
    net, policy, grid = args
    system = {**base_system(grid), "scheduling-policy": policy,
              "all-reduce-implementation": ["direct"] * len(net["topology"]),
              "all-to-all-implementation": ["direct"] * len(net["topology"])}
    ds = flowsim.simulate(net, grid.workload, system, model="flow", iterations=grid.iterations)
    return ds[["layer_exposed_comm_ns", "layer_comm_ns", "blocked_comm_ns",
               "exposed_comm_ns"]].mean("npu").drop_attrs()


# ------------------------------------------------------------------------------ figures
def plot_all(results: dict[str, xr.Dataset], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    return [plot_collectives(results["collectives"], out),
            plot_iteration(results["iteration"], out),
            plot_injection(results["injection"], results["coll_injection"], out),
            plot_chunks(results["coll_chunks"], results["scheduling"], out),
            plot_layers(results["layers"], out)]


COLORS = {"Flat100G": "tab:red", "Flat800G": "tab:orange", "Hier": "tab:blue",
          "HierOpt": "tab:green"}
STYLES = {"doubleBinaryTree": "-", "direct": "--"}


def plot_collectives(ds: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    algorithms = list(ds.allreduce.values)
    fig, axes = plt.subplots(1, len(algorithms), figsize=(5.5 * len(algorithms), 4.2),
                             squeeze=False, sharey=True)
    x = np.arange(ds.sizes["op"])
    width = 0.8 / ds.sizes["system"]
    for ax, algorithm in zip(axes[0], algorithms):
        for k, system in enumerate(ds.system.values):
            pos = x + (k - ds.sizes["system"] / 2 + 0.5) * width
            sel = ds.time_ns.sel(system=system, allreduce=algorithm) / 1e3
            if "flow" in ds.model.values:
                ax.bar(pos, sel.sel(model="flow"), width, color=COLORS[str(system)],
                       label=f"{system}, flow")
            if "analytical" in ds.model.values:
                ax.plot(pos, sel.sel(model="analytical"), "k_", ms=8,
                        label="analytical" if k == 0 else None)
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{o}\n{int(b) / 2**20:.2f} MiB" for o, b in
                          zip(ds.op.values, ds["bytes_per_npu"].values)], fontsize=7,
                      rotation=30)
        ax.set_title(f"scale-out all-reduce: {algorithm}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("collective latency (us)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("DLRM collectives on 128 GPUs (32 chunks, 64 in flight, 1 us injection)",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "dlrm_128_collectives.png")


def plot_iteration(ds: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    labels, k = [], 0
    best = float(ds.time_ns.sel(model="flow").min()) / 1e6 if "flow" in ds.model.values \
        else np.nan
    for system in ds.system.values:
        for algorithm in ds.allreduce.values:
            point = ds.sel(system=system, allreduce=algorithm)
            if "flow" in ds.model.values:
                flow = point.sel(model="flow")
                total = float(flow.time_ns) / 1e6
                compute = float(flow.compute_ns) / 1e6
                blocked = float(flow.blocked_comm_ns) / 1e6
                ax.bar(k, compute, color="0.75", label="compute" if k == 0 else None)
                ax.bar(k, blocked, bottom=compute, color=COLORS[str(system)],
                       label="ops waiting for a collective" if k == 0 else None)
                ax.bar(k, total - compute - blocked, bottom=compute + blocked,
                       color=COLORS[str(system)], alpha=0.45, hatch="//",
                       label="collectives still running after the last op" if k == 0
                       else None)
                ax.text(k, total * 1.03, f"{total / best:.1f}x", ha="center", va="bottom",
                        fontsize=7)
            if "analytical" in ds.model.values:
                ax.plot(k, float(point.time_ns.sel(model="analytical")) / 1e6, "k_", ms=14,
                        label="analytical model" if k == 0 else None)
            labels.append(f"{system}\n{'DBT' if algorithm == 'doubleBinaryTree' else algorithm}")
            k += 1
    ax.set_xticks(range(k), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(1, float(ds.time_ns.max()) / 1e6 * 1.6)
    ax.set_ylabel("time of 2 iterations (ms)")
    ax.set_title("DLRM, 128 GPUs, flow model (bars; x: ratio to the fastest) and analytical "
                 "model (ticks)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out / "dlrm_128_iteration.png")


def plot_injection(e2e: xr.Dataset, coll: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    inj = e2e.system_endpoint_delay.values / 1e3
    for ax, model in zip(axes[:2], ("flow", "analytical")):
        if model not in e2e.model.values:
            continue
        for system in e2e.system.values:
            for algorithm in e2e.allreduce.values:
                line = e2e.time_ns.sel(system=system, allreduce=algorithm, model=model) / 1e6
                if np.isfinite(line).any():
                    ax.plot(inj, line, STYLES.get(str(algorithm), ":"), marker="o",
                            color=COLORS[str(system)], label=f"{system}, {algorithm}")
        ax.set_title(f"iteration time, {model} model", fontsize=10)
        ax.set_ylabel("time of 2 iterations (ms)")
    ax = axes[2]
    op = str(coll.op.values[-1])
    for system in coll.system.values:
        for algorithm in coll.allreduce.values:
            line = coll.time_ns.sel(system=system, allreduce=algorithm, op=op,
                                    model="flow" if "flow" in coll.model.values
                                    else "analytical") / 1e3
            ax.plot(coll.system_endpoint_delay.values / 1e3, line,
                    STYLES.get(str(algorithm), ":"), marker="o", color=COLORS[str(system)])
    mib = int(coll["bytes_per_npu"].sel(op=op)) / 2**20
    ax.set_title(f"{op} ({mib:.1f} MiB) alone, flow model", fontsize=10)
    ax.set_ylabel("collective latency (us)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("injection latency per message (us)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, out / "dlrm_128_injection.png")


def plot_chunks(coll: xr.Dataset, sched: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    model = "flow" if "flow" in coll.model.values else "analytical"
    ops = list(coll.op.values)
    fig, axes = plt.subplots(1, len(ops) + 1, figsize=(5 * (len(ops) + 1), 4))
    active = coll.system_active_chunks_per_dimension.values
    for ax, op in zip(axes, ops):
        for system in coll.system.values:
            for algorithm in coll.allreduce.values:
                for j, splits in enumerate(coll.system_preferred_dataset_splits.values):
                    if op.startswith("embedding") and algorithm != coll.allreduce.values[0]:
                        continue        # the all-to-all does not use the all-reduce algorithm
                    line = coll.time_ns.sel(system=system, allreduce=algorithm, op=op,
                                            model=model,
                                            system_preferred_dataset_splits=splits) / 1e3
                    ax.plot(active, line, STYLES.get(str(algorithm), ":"),
                            marker="os^"[j % 3], color=COLORS[str(system)],
                            alpha=1.0 if j == 0 else 0.5,
                            label=f"{system}, {algorithm}, {splits} chunks")
        ax.set_title(f"{op} alone, {model} model", fontsize=10)
        ax.set_ylabel("collective latency (us)")
    ax = axes[-1]
    active = sched["setting__system_active_chunks_per_dimension"].values
    policy = sched["setting__system_scheduling_policy"].values
    for system in sched.system.values:
        for algorithm in sched.allreduce.values:
            line = sched.time_ns.sel(system=system, allreduce=algorithm, model="flow") / 1e6
            if not np.isfinite(line).any():
                continue
            for name, marker in (("LIFO", "o"), ("FIFO", "s")):
                pick = policy == name
                ax.plot(active[pick], line.values[pick], STYLES.get(str(algorithm), ":"),
                        marker=marker, color=COLORS[str(system)],
                        alpha=1.0 if name == "LIFO" else 0.5,
                        label=f"{system}, {algorithm}, {name}")
    ax.set_title("DLRM iteration time, flow model", fontsize=10)
    ax.set_ylabel("time of 2 iterations (ms)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("chunks in flight per dimension")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    axes[-1].legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, out / "dlrm_128_chunks.png")


def plot_layers(ds: xr.Dataset, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.8))
    names = [f"{lay}.{p}" for lay in ds.layer.values for p in ds["pass"].values]
    comm = ds.layer_comm_ns.stack(lp=("layer", "pass"))
    keep = np.asarray((comm > 0).any("case"))
    x = np.arange(int(keep.sum()))
    width = 0.8 / ds.sizes["case"]
    for k in range(ds.sizes["case"]):
        case = ds.isel(case=k)
        label = f"{case.system.item()}, {case.policy.item()}"
        exposed = case.layer_exposed_comm_ns.stack(lp=("layer", "pass")).values[keep] / 1e6
        total = case.layer_comm_ns.stack(lp=("layer", "pass")).values[keep] / 1e6
        pos = x + (k - ds.sizes["case"] / 2 + 0.5) * width
        ax.bar(pos, total, width, color=f"C{k}", alpha=0.35)
        ax.bar(pos, exposed, width, color=f"C{k}", label=f"{label} (solid: exposed)")
    ax.set_xticks(x, np.array(names)[keep], rotation=60, fontsize=6)
    ax.set_ylabel("ms (light: collective time)")
    ax.set_title("Which collectives are exposed: direct all-reduce, flow model", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out / "dlrm_128_layers.png")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    save_figure(fig, path)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------ summary
def summary(results: dict[str, xr.Dataset]) -> str:
    """The study's numbers as text (printed at the end of a run)."""
    lines = []
    it = results["iteration"]
    for model in it.model.values:
        t = it.time_ns.sel(model=model)
        best = float(t.min())
        lines.append(f"iteration time ({model} model), ms [ratio to the fastest]:")
        for system in it.system.values:
            cells = [f"{a}: {float(t.sel(system=system, allreduce=a)) / 1e6:8.2f} "
                     f"[{float(t.sel(system=system, allreduce=a)) / best:5.2f}x]"
                     for a in it.allreduce.values]
            lines.append(f"  {system:9s} " + "  ".join(cells))
    return "\n".join(lines)


def load_results(out: Path) -> dict[str, xr.Dataset]:
    """The datasets :func:`run_study` wrote to ``out``."""
    return load_datasets(out, "dlrm_128", [build(FULL).name for build in SWEEPS] + ["layers"])


main = study_entry(__doc__, run_study, load_results, plot_all, summary, FULL, QUICK)


if __name__ == "__main__":
    sys.exit(main())
