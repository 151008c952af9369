"""Case study 3: a 405B-parameter model at the cluster sizes people plan, 2K to 131K GPUs.

    python scripts/case_studies/llm_scale.py [--out case_studies_out] [--quick] [--jobs N]
                                             [--plot-only]

Llama 3.1 405B (the bundled Hugging Face config, ``config: llama31_405b``) trained as Meta
describes it (Dubey et al., "The Llama 3 Herd of Models", 2024, sec. 3.3): 8,192-token
sequences, a global batch of 16M tokens (2,048 sequences), BF16, tensor parallelism 8 with
sequence parallelism, the interleaved pipeline with the first and last stage one layer fewer,
context parallelism, ZeRO-1 with overlapped gradient reduce-scatters and parameter gathers;
on DGX H100 clusters (the ``dgx_h100`` preset) of 2,048 to 131,072 GPUs.

Every layout TP 8 x PP x CP x DP the batch allows is one point of one sweep (a zip axis over
the cluster's nodes and the degrees): PP 8 or 16 with two layers per virtual stage, CP 1 to
8, DP what the GPUs leave, and at least PP micro-batches per pipeline, a multiple of PP
(Megatron-LM's rule for interleaving), at most 128. Per size the fastest layout is kept; the
figure shows its step time against perfect scaling, and where its time goes.
"""

from __future__ import annotations

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

#: H100 SXM's dense BF16 peak (TFLOP/s): the MFU's denominator
PEAK_TFLOPS = 989.4


@dataclass(frozen=True)
class Grid:
    """Everything the study varies; :data:`FULL` is the study, :data:`QUICK` a smoke run."""

    gpus: tuple[int, ...] = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
    tp: int = 8
    pps: tuple[int, ...] = (8, 16)
    cps: tuple[int, ...] = (1, 2, 4, 8)
    #: layers (with the two the first and last stage leave out) per virtual stage
    layers_per_virtual_stage: int = 2
    gpus_per_node: int = 8
    workload: dict = field(default_factory=lambda: {
        "generator": "huggingface", "config": "llama31_405b", "sequence": 8192,
        "global_batch": 2048, "sp": True, "distributed_optimizer": True,
        "overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": True,
        "pipeline_layout": "first_last_fewer"})
    #: the model's layers (the config's), for the virtual stages
    layers: int = 126
    #: layouts with more micro-batches per pipeline are left out: their bubble is already
    #: below 1 / 16 of the schedule, they are never the fastest, and they cost the most to run
    max_micro_batches: int = 128


FULL = Grid()
QUICK = Grid(gpus=(2048, 16384), pps=(16,), cps=(1, 2))


def layouts(grid: Grid = FULL) -> list[dict[str, int]]:
    """Every (GPUs, PP, CP, VPP, DP) the batch allows, in the order of the sweep's axis."""
    out = []
    batch = grid.workload["global_batch"] // grid.workload.get("micro_batch", 1)
    for gpus in grid.gpus:
        for pp in grid.pps:
            for cp in grid.cps:
                ranks = grid.tp * pp * cp
                vpp = (grid.layers + 2) // (pp * grid.layers_per_virtual_stage)
                if gpus % ranks or batch % (gpus // ranks) or vpp < 1:
                    continue
                dp = gpus // ranks
                micro = batch // dp
                if micro < pp or (vpp > 1 and micro % pp) or micro > grid.max_micro_batches:
                    continue
                out.append({"gpus": gpus, "pp": pp, "cp": cp, "vpp": vpp, "dp": dp,
                            "micro_batches": micro})
    return out


def network(grid: Grid, gpus: int) -> dict[str, Any]:
    """The DGX H100 cluster of ``gpus`` GPUs (the ``cluster:`` block every point runs on)."""
    return {"cluster": {"device": "h100", "nodes": gpus // grid.gpus_per_node,
                        "gpus_per_node": grid.gpus_per_node}}


def scale_sweep(grid: Grid = FULL) -> Sweep:
    rows = layouts(grid)
    spec = {
        "base": {"network": network(grid, grid.gpus_per_node),
                 "system": "nccl", "model": "analytical",
                 "workload": {**grid.workload, "tp": grid.tp}},
        "zip": {"layout": {
            "network.cluster.nodes": [r["gpus"] // grid.gpus_per_node for r in rows],
            "workload.pp": [r["pp"] for r in rows], "workload.cp": [r["cp"] for r in rows],
            "workload.vpp": [r["vpp"] for r in rows]}},
    }
    return Sweep("layouts", spec, rows)


def tidy(raw: xr.Dataset, sweep: Sweep) -> xr.Dataset:
    """The sweep's points by layout, with its degrees as coordinates."""
    out = raw.rename(layout="layout")
    for key in ("gpus", "pp", "cp", "vpp", "dp", "micro_batches"):
        out = out.assign_coords({key: ("layout", [r[key] for r in sweep.rows])})
    keep = [v for v in ("time_ns", "compute_ns", "exposed_comm_ns", "error") if v in out]
    out = out[keep].drop_vars([c for c in out.coords if c not in (
        "gpus", "pp", "cp", "vpp", "dp", "micro_batches")])
    out["error"] = out.error.fillna("").astype(str)
    out.attrs = raw.attrs
    return out


def best(ds: xr.Dataset, model_flops: float) -> xr.Dataset:
    """Per cluster size, the fastest layout that ran, its split of the step and its MFU."""
    rows = []
    for gpus in np.unique(ds.gpus.values):
        here = ds.isel(layout=np.flatnonzero((ds.gpus.values == gpus) & (ds.error.values == "")))
        if here.sizes["layout"] == 0:
            continue
        pick = here.isel(layout=int(np.argmin(here.time_ns.values)))
        time = float(pick.time_ns)
        rows.append({"gpus": int(gpus), "time_s": time / 1e9,
                     "compute_s": float(pick.compute_ns) / 1e9,
                     "exposed_s": float(pick.exposed_comm_ns) / 1e9,
                     "layout": f"PP {int(pick.pp)} x CP {int(pick.cp)} x DP {int(pick.dp)}",
                     "pp": int(pick.pp), "cp": int(pick.cp), "vpp": int(pick.vpp),
                     "micro_batches": int(pick.micro_batches),
                     "mfu": model_flops / (time / 1e9 * int(gpus) * PEAK_TFLOPS * 1e12)})
    table = xr.Dataset({key: ("gpus", [r[key] for r in rows])
                        for key in ("time_s", "compute_s", "exposed_s", "layout", "pp",
                                    "cp", "vpp", "micro_batches", "mfu")},
                       coords={"gpus": [r["gpus"] for r in rows]})
    table["waiting_s"] = table.time_s - table.compute_s - table.exposed_s
    table.attrs["model_flops_per_step"] = model_flops
    return table


def flow_check(table: xr.Dataset, grid: Grid) -> xr.Dataset:
    """Each size's fastest layout again under the flow model (``flow_time_s``): the same
    network with the traffic of context, pipeline and data parallelism sharing links max-min
    fairly (timed on the run's quotient, one flow per orbit of its replicas)."""
    import flowsim

    times = []
    for i in range(table.sizes["gpus"]):
        row = table.isel(gpus=i)
        spec = {**grid.workload, "tp": grid.tp, "pp": int(row.pp), "cp": int(row.cp),
                "vpp": int(row.vpp)}
        times.append(float(flowsim.simulate(network(grid, int(row.gpus)), spec, "nccl",
                                            model="flow").time_ns) / 1e9)
    return table.assign(flow_time_s=("gpus", times))


def model_flops(grid: Grid) -> float:
    """The model FLOPs of one step (Megatron-LM's count; the same for every layout)."""
    import flowsim

    first = layouts(grid)[0]
    spec = {**grid.workload, "tp": grid.tp, "pp": first["pp"], "cp": first["cp"],
            "vpp": first["vpp"]}
    net = {"cluster": {"device": "h100", "nodes": first["gpus"] // grid.gpus_per_node,
                       "gpus_per_node": grid.gpus_per_node}}
    return float(flowsim.simulate(net, spec, "nccl").attrs["model_flops"])


def run_study(out: Path, grid: Grid = FULL, *, jobs: int | None = None,
              progress: bool = True, figures: bool = True) -> dict[str, xr.Dataset]:
    """Run the sweep, write ``llm_scale_layouts.nc`` and ``llm_scale_best.nc`` and the figure."""
    results = run_sweeps(out, "llm_scale", [scale_sweep], grid, tidy, jobs=jobs,
                         progress=progress)
    results["best"] = flow_check(best(results["layouts"], model_flops(grid)), grid)
    write_dataset(results["best"], out / "llm_scale_best.nc")
    if figures:
        plot_all(results, out)
    return results


def plot_all(results: dict[str, xr.Dataset], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = results["best"]
    gpus = table.gpus.values
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax.loglog(gpus, table.time_s.values, "o-", color="tab:blue", label="fastest layout")
    if "flow_time_s" in table:
        ax.loglog(gpus, table.flow_time_s.values, "x", color="tab:red", markersize=7,
                  label="same layout, flow model")
    ax.loglog(gpus, table.time_s.values[0] * gpus[0] / gpus, "--", color="gray",
              label="perfect scaling")
    for g, t, label in zip(gpus, table.time_s.values, table.layout.values):
        ax.annotate(str(label), (g, t), textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("H100 GPUs")
    ax.set_ylabel("step time (s), 16M tokens")
    ax.set_title("Llama 3.1 405B, 2,048 x 8,192 tokens per step")
    ax.legend(fontsize=8)
    x = np.arange(len(gpus))
    parts = [("compute", table.compute_s.values, "tab:green"),
             ("exposed communication", table.exposed_s.values, "tab:red"),
             ("pipeline bubble and waits", table.waiting_s.values, "tab:orange")]
    bottom = np.zeros(len(gpus))
    for name, values, color in parts:
        share = values / table.time_s.values
        bx.bar(x, share, bottom=bottom, color=color, label=name)
        bottom += share
    for i, mfu in enumerate(table.mfu.values):
        bx.text(i, 1.01, f"{100 * mfu:.0f}%", ha="center", fontsize=7)
    bx.set_xticks(x, [f"{g // 1024}K" for g in gpus])
    bx.set_ylim(0, 1.1)
    bx.set_xlabel("H100 GPUs (MFU above the bars)")
    bx.set_ylabel("share of the step")
    bx.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "llm_scale.png"
    save_figure(fig, path)
    plt.close(fig)
    return [path]


def summary(results: dict[str, xr.Dataset]) -> str:
    table = results["best"]
    lines = ["fastest layout per cluster size (TP 8):"]
    for i in range(table.sizes["gpus"]):
        row = table.isel(gpus=i)
        lines.append(f"  {int(row.gpus):7d} GPUs  {str(row.layout.values):26s} "
                     f"{int(row.micro_batches):3d} micro-batches  {float(row.time_s):6.2f} s  "
                     f"MFU {100 * float(row.mfu):4.1f}%  compute {float(row.compute_s):5.2f} s"
                     f"  exposed {float(row.exposed_s):5.2f} s  waiting "
                     f"{float(row.waiting_s):5.2f} s  flow model {float(row.flow_time_s):6.2f} s")
    return "\n".join(lines)


def load_results(out: Path) -> dict[str, Any]:
    """The datasets :func:`run_study` wrote to ``out``."""
    return load_datasets(out, "llm_scale", ["layouts", "best"])


main = study_entry(__doc__, run_study, load_results, plot_all, summary, FULL, QUICK)


if __name__ == "__main__":
    sys.exit(main())
