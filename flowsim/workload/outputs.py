"""Files a workload run writes: a Chrome-trace timeline and ASTRA-sim-1.0-style CSVs."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import xarray as xr

from .._io import write_text_atomic
from ..trace import _slice, write_trace
from .engine import RunRecord
from .graph import Workload

_LANES = {"compute": "compute", "memory": "memory"}


def workload_trace(record: RunRecord, workload: Workload) -> dict:
    """Trace events: per program (shown by its first NPU) a compute track, a memory track and
    as many communication tracks as it had collectives / messages in flight at once."""
    events = []
    lanes: dict[tuple[int, str], list[float]] = {}
    for entry in sorted(record.timeline, key=lambda e: e["start"]):
        op = entry["op"]
        pid = f"NPU {entry['npu']}" + ("" if len(workload.programs) == 1 else
                                       f" (program {entry['program']})")
        kind = _LANES.get(op.kind, "comm")
        free = lanes.setdefault((entry["program"], kind), [])
        lane = next((i for i, end in enumerate(free) if end <= entry["start"]), len(free))
        if lane == len(free):
            free.append(0.0)
        free[lane] = entry["end"]
        tid = {"compute": 0, "memory": 1}.get(kind, 2 + lane)
        layer = workload.layers[op.layer] if 0 <= op.layer < len(workload.layers) else ""
        args = {"kind": op.kind, "layer": layer, "pass": op.pass_}
        if op.size:
            args["bytes"] = op.size
        events.append(_slice(op.name or op.kind, pid, tid, entry["start"], entry["end"], args))
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_workload_trace(record: RunRecord, workload: Workload, path: str | os.PathLike
                         ) -> None:
    """Write the timeline of a run atomically (open it in Perfetto or chrome://tracing)."""
    write_trace(workload_trace(record, workload), path)


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
    layers = out / "end_to_end.csv"
    write_text_atomic(layers, buffer.getvalue())
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    names = ("finish_ns", "compute_ns", "exposed_comm_ns", "idle_ns")
    writer.writerow(["npu", *names])
    for npu in range(ds.sizes["npu"]):
        writer.writerow([npu] + [f"{float(ds[n][npu]):.3f}" for n in names])
    npus = out / "npus.csv"
    write_text_atomic(npus, buffer.getvalue())
    return [layers, npus]
