"""The Dataset of one workload run (see :func:`flowsim.simulate`) and ASTRA-sim-1.0-style CSVs
of it."""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import write_text_atomic
from .._version import __version__
from ..workload.graph import PASSES, Workload
from .build import numpy_dataset
from .collective import per_dimension_config
from .stats import SimulationStats, to_attrs
from .units import set_units

if TYPE_CHECKING:
    import xarray as xr


@dataclass
class RunRecord:
    """What a workload run measured, as plain arrays (the engine fills it in).

    Attributes
    ----------
    time_ns : float
        When the last op and every collective it issued had finished.
    npu_finish_ns, npu_compute_ns : ndarray, shape (npus,)
    npu_exposed_ns : ndarray, shape (npus,)
        Blocked on collectives (and sends), then the communication tail after the NPU's last
        op.
    npu_blocked_ns : ndarray, shape (npus,)
        Blocked on any communication, receives included (ASTRA-sim 1.0's per-layer sums).
    npu_bubble_ns : ndarray, shape (npus,)
        Blocked on point-to-point receives: the pipeline bubble.
    layer_compute_ns, layer_exposed_ns, layer_comm_ns : ndarray, shape (layers + 1, passes)
        Per layer and pass, summed over the NPUs that ran the layer's ops; the last row
        collects unlabelled ops.
    layer_npus : ndarray of int, shape (layers + 1,)
        NPUs that ran ops of each layer (the per-layer means divide by it).
    dim_bytes, dim_busy_ns : ndarray, shape (ndims,)
    collectives, messages : int
    stats : SimulationStats
    timeline : list of dict
        Op start and end times (only when a timeline was asked for).
    """

    time_ns: float
    npu_finish_ns: np.ndarray
    npu_compute_ns: np.ndarray
    npu_exposed_ns: np.ndarray
    npu_blocked_ns: np.ndarray
    npu_bubble_ns: np.ndarray
    layer_compute_ns: np.ndarray
    layer_exposed_ns: np.ndarray
    layer_comm_ns: np.ndarray
    layer_npus: np.ndarray
    dim_bytes: np.ndarray
    dim_busy_ns: np.ndarray
    collectives: int
    messages: int
    stats: SimulationStats
    timeline: list[dict] = field(default_factory=list)


@dataclass
class WorkloadRun:
    """A finished workload run: its :class:`RunRecord` and what it ran on, as plain arrays
    (:func:`flowsim.system.run_training` returns it); :meth:`to_dataset` is what
    :func:`flowsim.simulate` returns, :meth:`summary` the headline numbers without xarray."""

    record: RunRecord
    network: Any
    system: Any
    model: str
    workload: Workload
    iterations: int
    peak_flops: float | None = None
    #: device memory of one NPU (GiB: a vendor's "80 GB" of HBM is 80 GiB), when the compute
    #: model is a device preset
    memory_gib: float | None = None

    def to_dataset(self) -> xr.Dataset:
        """The run as an xarray Dataset (see :func:`flowsim.simulate`)."""
        ds = workload_dataset(self.record, self.network, self.system, self.model,
                              self.workload, self.iterations, peak_flops=self.peak_flops)
        ds.attrs.update(memory_of(self.workload, self.memory_gib, flat=True))
        return ds

    def summary(self) -> dict[str, Any]:
        """What ``flowsim run`` prints (``--json``): means over NPUs, shares, throughput, the
        three layers with the most exposed communication, per-dimension bytes and busy time."""
        rec, net = self.record, self.network
        idle = npu_idle(rec)
        layers = np.array(list(self.workload.layers) + ["(other)"], dtype=str)
        # per layer and pass means over the layer's NPUs, then summed over passes (as the
        # Dataset's layer_exposed_comm_ns.sum("pass"))
        by_layer = (rec.layer_exposed_ns / np.maximum(rec.layer_npus, 1)[:, None]).sum(axis=1)
        top = np.lexsort((by_layer,))[::-1][:3]   # as xarray's sortby(ascending=False)
        return {
            "time_ns": float(rec.time_ns), "model": self.model,
            "workload": self.workload.name, "npus": int(net.npus),
            **({"layout": self.workload.layout} if self.workload.layout else {}),
            "iterations": int(self.iterations),
            "compute_ns": float(np.mean(rec.npu_compute_ns)),
            "exposed_comm_ns": float(np.mean(rec.npu_exposed_ns)),
            "bubble_ns": float(np.mean(rec.npu_bubble_ns)), "idle_ns": float(np.mean(idle)),
            **shares_of(rec.npu_finish_ns, rec.npu_compute_ns, rec.npu_exposed_ns,
                        rec.npu_bubble_ns, idle),
            **throughput(self.workload.model_flops,
                         float(rec.time_ns) * 1e-9 / self.iterations, int(net.npus),
                         self.peak_flops),
            "dim_bytes": [float(b) if np.isfinite(b) else None
                          for b in _attributable(net, rec.dim_bytes)],
            "dim_busy_ns": [float(b) for b in rec.dim_busy_ns],
            "most_exposed": [[str(layers[i]), float(by_layer[i])] for i in top
                             if by_layer[i] > 0],
            **memory_of(self.workload, self.memory_gib),
            "collectives": int(rec.collectives), "stats": rec.stats.as_dict()}


def workload_dataset(record: RunRecord, network, system, model: str, workload: Workload,
                     iterations: int, peak_flops: float | None = None) -> xr.Dataset:
    """Assemble the Dataset of one workload run (see :func:`flowsim.simulate`);
    ``peak_flops`` (FLOP/s per NPU, of the compute model the run used) gives the MFU."""
    layers = list(workload.layers) + ["(other)"]
    keep = np.ones(len(layers), bool)
    keep[-1] = bool(record.layer_compute_ns[-1].any() or record.layer_exposed_ns[-1].any()
                    or record.layer_comm_ns[-1].any())
    cfg = network.config
    _, _, per_link = per_dimension_config(network)
    total = float(record.time_ns)
    idle = npu_idle(record)
    per_npu = np.maximum(record.layer_npus, 1)[:, None]  # sums over NPUs -> means
    ds = numpy_dataset(
        data_vars={
            "time_ns": ((), total),
            "finish_ns": (("npu",), record.npu_finish_ns),
            "compute_ns": (("npu",), record.npu_compute_ns),
            "exposed_comm_ns": (("npu",), record.npu_exposed_ns),
            "bubble_ns": (("npu",), record.npu_bubble_ns),
            "blocked_comm_ns": (("npu",), record.npu_blocked_ns),
            "idle_ns": (("npu",), idle),
            "layer_compute_ns": (("layer", "pass"), (record.layer_compute_ns / per_npu)[keep]),
            "layer_exposed_comm_ns": (("layer", "pass"),
                                      (record.layer_exposed_ns / per_npu)[keep]),
            "layer_comm_ns": (("layer", "pass"), (record.layer_comm_ns / per_npu)[keep]),
            "dim_bytes": (("dim",), _attributable(network, record.dim_bytes)),
            "dim_busy_ns": (("dim",), record.dim_busy_ns),
        },
        coords={
            "npu": np.arange(network.npus),
            "layer": np.array(layers, dtype=str)[keep],
            "layer_npus": (("layer",), np.asarray(record.layer_npus, np.int64)[keep]),
            "pass": np.array(PASSES, dtype=str),
            "dim": np.arange(network.ndims),
            "topology": (("dim",), np.array(cfg.topology[: network.ndims] if not per_link
                                            else ["Fabric"] * network.ndims, dtype=str)),
            "npus_count": (("dim",), np.array(network.dims)),
        },
        attrs={
            "workload": workload.name,
            **({"layout": workload.layout} if workload.layout else {}),
            "model": model,
            "iterations": int(iterations),
            "npus": int(network.npus),
            # ASTRA-sim 1.0's "total exposed comm": end time minus compute (NPU 0)
            "exposed_comm_total_ns": total - float(record.npu_compute_ns[0]),
            "collectives": int(record.collectives),
            "messages": int(record.messages),
            "chunks_per_collective": int(system.splits),
            "flowsim_version": __version__,
            **to_attrs(record.stats),
        },
    )
    ds.attrs.update(shares_of(record.npu_finish_ns, record.npu_compute_ns,
                              record.npu_exposed_ns, record.npu_bubble_ns, idle))
    ds.attrs.update(throughput(workload.model_flops, total * 1e-9 / iterations,
                               int(network.npus), peak_flops))
    set_units(ds)
    ds["dim_bytes"].attrs["units"] = "bytes"
    return ds


def _attributable(network, dim_bytes: np.ndarray) -> np.ndarray:
    """Bytes over the links of each logical dimension, NaN for a dimension that owns no
    links of its own: a fabric's (links belong to no logical dimension, as for collectives)
    and the pieces of a dimension a workload split (their links are shared)."""
    owned = np.isin(np.arange(network.ndims), network.link_dim)
    return np.where(owned, dim_bytes, np.nan)


#: Sub-picosecond remainders of ``finish - compute - exposed`` are rounding, not idle time.
IDLE_NOISE_NS = 1e-3


def npu_idle(record: RunRecord) -> np.ndarray:
    """Per NPU, the time neither computing, exposed to communication nor in the bubble."""
    idle = (record.npu_finish_ns - record.npu_compute_ns - record.npu_exposed_ns
            - record.npu_bubble_ns)
    idle[idle < IDLE_NOISE_NS] = 0.0   # float rounding of the subtraction, not idle time
    return idle


def throughput(model_flops: float | None, iteration_s: float, npus: int,
               peak_flops: float | None) -> dict[str, float]:
    """``model_flops`` (per iteration), ``tflops_per_npu`` (model FLOPs per second and NPU,
    in 1e12) and ``mfu`` (that over the NPU's peak), for the keys that are known: nothing
    without the workload's model FLOPs, no MFU without a peak."""
    if not model_flops or not iteration_s > 0:
        return {}
    per_npu = model_flops / iteration_s / npus
    out = {"model_flops": float(model_flops), "tflops_per_npu": per_npu / 1e12}
    if peak_flops:
        out["mfu"] = per_npu / peak_flops
    return out


def memory_of(workload: Workload, capacity_gib: float | None, *, flat: bool = False
              ) -> dict[str, Any]:
    """The workload's memory estimate per NPU in GiB (2^30 B, as PyTorch reports memory):
    ``memory_gib`` (the peak total) and ``memory`` (its parts and the pipeline stage, or
    with ``flat`` the parts as ``memory_<part>_gib`` keys, for Dataset attributes), and
    ``memory_capacity_gib``, the device's, when known (and, unless ``flat``, ``memory_fits``:
    whether the estimate is within it). Nothing for a workload without an estimate."""
    if workload.memory is None:
        return {}
    parts = {k: (int(v) if k == "stage" else v / 2**30) for k, v in workload.memory.items()}
    out: dict[str, Any] = {"memory_gib": parts.pop("total")}
    if flat:
        out.update({f"memory_{k}" + ("" if k == "stage" else "_gib"): v
                    for k, v in parts.items()})
    else:
        out["memory"] = parts
    if capacity_gib:
        out["memory_capacity_gib"] = float(capacity_gib)
        if not flat:   # for a script reading --json; a Dataset keeps the two numbers
            out["memory_fits"] = bool(out["memory_gib"] <= capacity_gib)
    return out


def shares(ds: xr.Dataset) -> dict[str, float]:
    """A run's shares from its Dataset (see :func:`shares_of`)."""
    return shares_of(*(ds[name].values for name in ("finish_ns", "compute_ns",
                                                    "exposed_comm_ns", "bubble_ns",
                                                    "idle_ns")))


def shares_of(finish: np.ndarray, compute: np.ndarray, exposed: np.ndarray,
              bubble: np.ndarray, idle: np.ndarray) -> dict[str, float]:
    """The one definition of a run's shares, used by the summary, ``--json``, the CSVs and the
    Dataset's attributes: the mean over NPUs of compute, exposed communication, pipeline
    bubble and idle time, each divided by the mean over NPUs of their finish time (so the
    four add up to 1). NaN when no NPU did anything."""
    span = float(np.mean(finish))
    parts = {"compute_share": compute, "exposed_comm_share": exposed, "bubble_share": bubble,
             "idle_share": idle}
    return {key: float(np.mean(part)) / span if span > 0 else math.nan
            for key, part in parts.items()}


def write_csvs(ds: xr.Dataset, directory: str | os.PathLike) -> list[Path]:
    """Write ``end_to_end.csv`` (per layer, µs, the columns of ASTRA-sim 1.0's EndToEnd.csv)
    and ``npus.csv`` (per NPU, ns) into ``directory``; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    passes = ("fwd", "wg", "ig")
    writer.writerow(["layer"] + [f"{p}_compute_us" for p in passes] +
                    [f"{p}_exposed_comm_us" for p in passes] +
                    [f"{p}_total_comm_us" for p in passes])
    for layer in ds.layer.values:
        row = ds.sel(layer=layer)
        values = [float(row[name].sel({"pass": p})) / 1e3
                  for name in ("layer_compute_ns", "layer_exposed_comm_ns", "layer_comm_ns")
                  for p in passes]
        writer.writerow([layer] + [f"{v:.6f}" for v in values])
    writer.writerow([])
    writer.writerow(["time_us", f"{float(ds.time_ns) / 1e3:.6f}"])
    writer.writerow(["exposed_comm_total_us", f"{ds.attrs['exposed_comm_total_ns'] / 1e3:.6f}"])
    for key, value in shares(ds).items():   # the summary's shares, defined once
        writer.writerow([key, f"{value:.6f}"])
    layers = out / "end_to_end.csv"
    write_text_atomic(layers, buffer.getvalue())
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    names = ("finish_ns", "compute_ns", "exposed_comm_ns", "bubble_ns", "idle_ns")
    writer.writerow(["npu", *names])
    for npu in range(ds.sizes["npu"]):
        writer.writerow([npu] + [f"{float(ds[n][npu]):.3f}" for n in names])
    npus = out / "npus.csv"
    write_text_atomic(npus, buffer.getvalue())
    return [layers, npus]
