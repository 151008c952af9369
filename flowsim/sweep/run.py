"""One point of a sweep: its evaluation (a pure function of its configuration, so a sweep
gives the same numbers, bit for bit, however it was split or where it ran), shards, and the
Datasets of points and of the grid. How points are run is :mod:`.execute`, where they are
kept :mod:`.parts`.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import xarray as xr

from ..errors import ConfigError, FlowsimError, FlowsimWarning
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


def evaluate_point(point: dict, max_work: float | None = None) -> tuple[tuple[float, ...], str]:
    """Simulate one resolved point; returns the outputs (see :data:`OUTPUTS` and
    :data:`WORKLOAD_OUTPUTS`) and an error message ('' when it ran).

    A point that fails records its error instead of stopping the sweep: an invalid
    configuration (a :class:`~flowsim.errors.FlowsimError`) by its message, anything else
    (a bug) as ``internal error (TypeError): ...``, so one bad corner of a grid never costs
    the others. ``max_work`` is the work budget of each point (see :mod:`flowsim.system.budget`).
    """
    names = WORKLOAD_OUTPUTS if "workload" in point else OUTPUTS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)
            if "workload" in point:
                return _evaluate_workload(point, max_work), ""
            return _evaluate_collective(point, max_work), ""
    except FlowsimError as exc:
        return (np.nan,) * len(names), str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug in one point must not end the sweep
        text = " ".join(str(exc).split())[:500]
        return (np.nan,) * len(names), f"internal error ({type(exc).__name__}): {text}"


# Points are evaluated from the runs' records, not their Datasets: building a Dataset per
# point was a third of a sweep of small collectives, and its numbers are the records'.
def _evaluate_collective(point: dict, max_work: float | None) -> tuple[float, ...]:
    from ..results.collective import link_utilization
    from ..system import run_collective

    record = run_collective(point["network"], point["collective"], point["size"],
                            point["system"], model=point["model"], dims=point.get("dims"),
                            root=point.get("root", 0), max_work=max_work)
    return (float(record.time_ns), float(record.link_bytes.sum()),
            float(link_utilization(record).max()), float(record.stats.flows))


def _evaluate_workload(point: dict, max_work: float | None) -> tuple[float, ...]:
    from ..system import run_training

    record = run_training(point["network"], point["workload"], point["system"],
                          model=point["model"], iterations=point["iterations"],
                          max_work=max_work).record
    return (float(record.time_ns), float(np.mean(record.npu_compute_ns)),
            float(np.mean(record.npu_exposed_ns)), float(np.mean(record.npu_blocked_ns)))


def evaluate_batch(spec: SweepSpec, indices: list[int], max_work: float | None = None
                   ) -> list[tuple[int, tuple, str]]:
    """Evaluate grid points by index (the unit of work sent to processes and Dask workers)."""
    return [(i, *_evaluate_index(spec, i, max_work)) for i in indices]


def _evaluate_index(spec: SweepSpec, index: int, max_work: float | None
                    ) -> tuple[tuple[float, ...], str]:
    """One grid point; a point whose settings do not combine (a key no config of its has)
    is an error entry, as an invalid configuration is."""
    try:
        point = spec.point(index)
    except FlowsimError as exc:
        names = WORKLOAD_OUTPUTS if spec.kind == "workload" else OUTPUTS
        return (np.nan,) * len(names), str(exc)
    return evaluate_point(point, max_work)


def shard_indices(size: int, shard: int, shards: int) -> list[int]:
    """Points of shard ``shard`` of ``shards``: every ``shards``-th point, so shards mix
    cheap and expensive corners of the grid and take about the same time."""
    return list(range(shard, size, shards))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"3/16"`` -> ``(3, 16)``; ``None`` reads Slurm / PBS array variables, if any."""
    env = os.environ
    if text is None:
        if "SLURM_ARRAY_TASK_ID" in env:
            index = _env_int("SLURM_ARRAY_TASK_ID") - _env_int("SLURM_ARRAY_TASK_MIN")
            count = _env_int("SLURM_ARRAY_TASK_COUNT")
            if count < 1:
                raise ConfigError("SLURM_ARRAY_TASK_COUNT is not set: pass --shard I/N")
            return _check_shard(index, count, "SLURM_ARRAY_TASK_ID")
        for name in ("PBS_ARRAY_INDEX", "PBS_ARRAYID"):
            if name in env:
                count = _env_int("FLOWSIM_SHARDS")
                if count < 1:
                    raise ConfigError(f"{name} is set but the shard count is not: set "
                                      f"FLOWSIM_SHARDS or pass --shard I/N")
                return _check_shard(_env_int(name), count, name)
        return None
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise ConfigError(f"argument --shard: expected I/N (e.g. 3/16), found {text!r}") \
            from None
    return _check_shard(index, count, "--shard")


def _env_int(name: str) -> int:
    """An integer environment variable (0 when unset)."""
    text = os.environ.get(name, "0")
    try:
        return int(text) if len(text) <= 18 else int("x")
    except ValueError:
        raise ConfigError(f"environment variable {name}: expected an integer, found "
                          f"{text[:40]!r}") from None


def _check_shard(index: int, count: int, where: str) -> tuple[int, int]:
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"{where}: shard {index} of {count} is out of range (expected "
                          f"0 <= I < N)")
    return index, count


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
            columns.append((name, key, column))
        axes.append((axis.name, columns))
    return sweep_grid_dataset(axes, spec.shape, outputs(spec), results, attrs={
        "spec": spec.text, "spec_digest": spec.digest})


def _safe(key: str) -> str:
    from .spec import dimension_name
    return dimension_name(key)
