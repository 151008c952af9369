"""Running a sweep: points evaluated serially, in processes, or on a Dask cluster; results
kept in part files written atomically, so a killed run resumes and shards merge.

Every point is computed by the same pure function of its configuration, so a sweep gives the
same numbers, bit for bit, however it was split or where it ran.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..errors import ConfigError, FlowsimError, FlowsimWarning
from ..results import from_attrs, write_dataset
from ..results.sweep import sweep_grid_dataset, sweep_points_dataset
from .spec import SweepSpec

#: scalar results of every point of a collective sweep (name, units)
OUTPUTS = {"time_ns": "ns", "total_link_bytes": "bytes", "max_link_utilization": "1",
           "flows": "1"}
#: scalar results of every point of a workload sweep: the run's end, and per NPU compute,
#: exposed communication and its blocked part (time an op waited for a collective; the rest
#: is collectives still running after the NPU's last op), averaged over the NPUs
WORKLOAD_OUTPUTS = {"time_ns": "ns", "compute_ns": "ns", "exposed_comm_ns": "ns",
                    "blocked_comm_ns": "ns"}


def outputs(spec: SweepSpec) -> dict[str, str]:
    """The scalar results (name: units) every point of ``spec`` gives."""
    return WORKLOAD_OUTPUTS if spec.kind == "workload" else OUTPUTS


def evaluate_point(point: dict) -> tuple[tuple[float, ...], str]:
    """Simulate one resolved point; returns the outputs (see :data:`OUTPUTS` and
    :data:`WORKLOAD_OUTPUTS`) and an error message ('' when it ran). A point whose
    configuration is invalid records its error instead of stopping the sweep."""
    if "workload" in point:
        return _evaluate_workload(point)
    from ..system import simulate_collective

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)
            ds = simulate_collective(point["network"], point["collective"], point["size"],
                                     point["system"], model=point["model"],
                                     dims=point.get("dims"), root=point.get("root", 0))
    except FlowsimError as exc:
        return (np.nan,) * len(OUTPUTS), str(exc)
    return (float(ds.time_ns), float(ds.link_bytes.sum()),
            float(ds.link_utilization.max()), float(from_attrs(ds.attrs).flows)), ""


def _evaluate_workload(point: dict) -> tuple[tuple[float, ...], str]:
    from ..system import simulate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)
            ds = simulate(point["network"], point["workload"], point["system"],
                          model=point["model"], iterations=point["iterations"])
    except FlowsimError as exc:
        return (np.nan,) * len(WORKLOAD_OUTPUTS), str(exc)
    return (float(ds.time_ns), float(ds.compute_ns.mean()), float(ds.exposed_comm_ns.mean()),
            float(ds.blocked_comm_ns.mean())), ""


def evaluate_batch(spec: SweepSpec, indices: list[int]) -> list[tuple[int, tuple, str]]:
    """Evaluate grid points by index (the unit of work sent to processes and Dask workers)."""
    return [(i, *evaluate_point(spec.point(i))) for i in indices]


def shard_indices(size: int, shard: int, shards: int) -> list[int]:
    """Points of shard ``shard`` of ``shards``: every ``shards``-th point, so shards mix
    cheap and expensive corners of the grid and take about the same time."""
    return list(range(shard, size, shards))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"3/16"`` -> ``(3, 16)``; ``None`` reads Slurm / PBS array variables, if any."""
    env = os.environ
    if text is None:
        if "SLURM_ARRAY_TASK_ID" in env:
            index = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", 0))
            count = int(env.get("SLURM_ARRAY_TASK_COUNT", 0))
            if count < 1:
                raise ConfigError("SLURM_ARRAY_TASK_COUNT is not set: pass --shard I/N")
            return _check_shard(index, count, "SLURM_ARRAY_TASK_ID")
        for name in ("PBS_ARRAY_INDEX", "PBS_ARRAYID"):
            if name in env:
                count = int(env.get("FLOWSIM_SHARDS", 0))
                if count < 1:
                    raise ConfigError(f"{name} is set but the shard count is not: set "
                                      f"FLOWSIM_SHARDS or pass --shard I/N")
                return _check_shard(int(env[name]), count, name)
        return None
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise ConfigError(f"argument --shard: expected I/N (e.g. 3/16), found {text!r}") \
            from None
    return _check_shard(index, count, "--shard")


def _check_shard(index: int, count: int, where: str) -> tuple[int, int]:
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"{where}: shard {index} of {count} is out of range (expected "
                          f"0 <= I < N)")
    return index, count


def _batches(indices: list[int], n: int) -> list[list[int]]:
    n = max(1, min(n, len(indices)))
    return [indices[i::n] for i in range(n)]


def compute(spec: SweepSpec, indices: list[int], *, jobs: int = 1, client: Any = None,
            progress: bool = False) -> dict[int, tuple[tuple, str]]:
    """Evaluate ``indices``; returns ``{index: (outputs, error)}``.

    On Ctrl-C the points finished so far are returned through :class:`SweepInterrupted`.
    """
    results: dict[int, tuple[tuple, str]] = {}
    if not indices:
        return results
    bar = _progress(len(indices), progress)
    try:
        if client is not None:
            batches = _batches(indices, 8 * max(1, len(client.ncores() or {1: 1})))
            futures = client.map(evaluate_batch, [spec] * len(batches), batches, pure=False)
            from distributed import as_completed
            for future in as_completed(futures):
                _collect(results, future.result(), bar)
        elif jobs <= 1:
            for i in indices:
                _collect(results, evaluate_batch(spec, [i]), bar)
        else:
            batches = _batches(indices, 16 * jobs)
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                try:
                    for out in pool.map(evaluate_batch, [spec] * len(batches), batches):
                        _collect(results, out, bar)
                except KeyboardInterrupt:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    except KeyboardInterrupt:
        raise SweepInterrupted(results) from None
    finally:
        if bar is not None:
            bar.close()
    return results


class SweepInterrupted(FlowsimError):
    """Ctrl-C during a sweep; ``results`` holds the points that finished."""

    def __init__(self, results: dict) -> None:
        super().__init__(f"interrupted after {len(results)} point(s)")
        self.results = results


def _collect(results: dict, out: Iterable, bar: Any) -> None:
    for index, outputs, error in out:
        results[index] = (tuple(outputs), error)
        if bar is not None:
            bar.update(1)


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="point", desc="flowsim sweep", smoothing=0.1)


# ---------------------------------------------------------------- part files and datasets
def part_dataset(spec: SweepSpec, results: dict[int, tuple[tuple, str]],
                 shard: tuple[int, int] | None = None) -> xr.Dataset:
    """Flat Dataset of some points (dimension ``point``), as stored in part / shard files."""
    return sweep_points_dataset(list(outputs(spec)), results, spec.digest, shard)


def grid_dataset(spec: SweepSpec, results: dict[int, tuple[tuple, str]]) -> xr.Dataset:
    """The sweep result: one variable per output, one dimension per axis."""
    from ..units import parse_size

    missing = [i for i in range(spec.size) if i not in results]
    if missing:
        raise FlowsimError(f"{len(missing)} grid point(s) have no result "
                           f"(first: {missing[:10]})")
    axes = []
    for axis in spec.axes:
        columns = []
        for j, key in enumerate(axis.keys):
            column = [row[j] for row in axis.values]
            if key == "size":  # sizes as bytes, so that ds.sel(size=1 << 20) works
                column = [parse_size(v, source=spec.source, key="size") for v in column]
            name = axis.name if len(axis.keys) == 1 else f"{axis.name}__" + _safe(key)
            columns.append((name, column))
        axes.append((axis.name, columns))
    return sweep_grid_dataset(axes, spec.shape, outputs(spec), results, attrs={
        "spec": spec.text, "spec_digest": spec.digest})


def _safe(key: str) -> str:
    from .spec import dimension_name
    return dimension_name(key)


def read_parts(folder: Path, spec: SweepSpec | None = None) -> dict[int, tuple[tuple, str]]:
    """Results stored in the part files of ``folder`` that belong to ``spec`` (all if None)."""
    results: dict[int, tuple[tuple, str]] = {}
    for path in sorted(folder.glob("*.nc")):
        with xr.open_dataset(path, engine="scipy") as ds:
            if spec is not None and ds.attrs.get("spec_digest") != spec.digest:
                continue
            ds = ds.load()
        names = outputs(spec) if spec is not None else \
            OUTPUTS if "flows" in ds else WORKLOAD_OUTPUTS
        for pos, index in enumerate(ds.point.values.tolist()):
            results[int(index)] = (tuple(float(ds[name].values[pos]) for name in names),
                                   str(ds.error.values[pos]))
    return results


def write_part(folder: Path, name: str, ds: xr.Dataset) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    write_dataset(ds, path)
    return path
