"""The estimator API for optimizers: one collective's time in microseconds to milliseconds,
and a batched analytical form over arrays of sizes, bandwidths and latencies.

``estimate``
    One point, either model; networks and system configs are cached between calls, and no
    Dataset is built.
``estimate_batch``
    A broadcast grid: the analytical model in one jitted pass (or, with ``model="flow"``,
    the flow model point by point). The collective's structure (phases, groups of identical
    steps, hop counts) is derived once per network, system and collective and kept as plain
    arrays; a kernel (:func:`flowsim.system._kernels.batched_collective_times`) then prices
    every point's phases with the cost model and runs ASTRA-sim's dimension queues, without
    arrays of points x chunks x phases. Inputs that are the same at every point stay one row.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import xarray as xr

from ._validate import BANDWIDTH_GBPS, LATENCY_NS, SIZE_BYTES
from .collectives import canonical_collective
from .errors import ConfigError, SimulationError, config_error, public_api
from .network.engine import check_model
from .system.budget import check_max_work, check_work, collective_work
from .system.collective import _check_dims, _check_npu
from .system.config import SystemConfig
from .system.load import default_system_name, load_system
from .system.phases import assign_variants, chunk_sizes, collective_phases
from .system.scheduler import Schedule, can_replicate
from .topology import Network, load_network
from .units import NETWORK_GBPS_TO_BYTES_PER_NS, parse_size


@functools.lru_cache(maxsize=256)
def _system_from_key(key: str) -> SystemConfig:
    return load_system(json.loads(key)) if key.startswith("{") else load_system(key)


def _system(system: Any, network: Any) -> SystemConfig:
    """``system`` parsed once per distinct value; ``None``: the network's default."""
    if system is None:
        system = default_system_name(network)
    if system is None or isinstance(system, SystemConfig):
        return load_system(system)
    if isinstance(system, Mapping):
        return _system_from_key(json.dumps(dict(system), sort_keys=True))
    return _system_from_key(os.fspath(system))


def _collective(collective: str) -> str:
    name = canonical_collective(collective)
    if name is None or name == "send_recv":
        raise config_error("argument", "collective",
                           "all-reduce, reduce-scatter, all-gather, all-to-all, broadcast or "
                           "reduce", collective)
    return name


@public_api
def estimate(network: Any, collective: str, size: int | str, system: Any = None,
             model: str = "analytical", *, dims: Any = None, root: int = 0,
             max_work: float | None = None) -> float:
    """Time of one collective in ns (what :func:`flowsim.simulate_collective` reports as
    ``time_ns``), without building a Dataset. Repeated calls reuse built networks, parsed
    system configs and compiled kernels. ``max_work``: the work budget (see
    :mod:`flowsim.system.budget`)."""
    budget = check_max_work(max_work)
    net = load_network(network)
    sys_cfg = _system(system, net)
    model = check_model(model)
    name = _collective(collective)
    nbytes = parse_size(size, source="argument", key="size")
    dims_t, root = _check_dims(net, dims), _check_npu(net, root, "root")
    chunks = assign_variants([collective_phases(net, sys_cfg, name, c, dims=dims_t, root=root)
                              for c in chunk_sizes(nbytes, sys_cfg.splits)])
    replicate = can_replicate(net, sys_cfg, chunks, False)
    check_work(collective_work(net, chunks, replicate), budget, "collective")
    schedule = Schedule(net, sys_cfg, model, replicate=replicate)
    schedule.issue(chunks)
    schedule.run()
    return max(schedule.ledger.collective_end.values(), default=0.0)


def _broadcast_dims(value: Any, ndims: int, name: str, default: np.ndarray
                    ) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Per-dimension arrays from None (the network's values), a scalar-per-dim list, or an
    array whose last axis is the dimension; and that array itself (float64) in the last case.
    """
    if value is None:
        return [np.asarray(v, np.float64) for v in default], None
    if isinstance(value, (list, tuple)):
        if len(value) != ndims:
            raise config_error("argument", name, f"{ndims} values (one per dimension)", value)
        # xarray objects are kept as they are: they broadcast by dimension name
        return [v if hasattr(v, "dims") else np.asarray(v, np.float64) for v in value], None
    arr = np.asarray(value, np.float64)
    if arr.shape[-1:] != (ndims,):
        raise config_error("argument", name,
                           f"an array whose last axis has length {ndims} (one per dimension)",
                           f"shape {arr.shape}")
    return [arr[..., d] for d in range(ndims)], arr


@public_api
def estimate_batch(network: Any, collective: str, size: Any, system: Any = None, *,
                   bandwidth: Any = None, latency: Any = None, dims: Any = None,
                   model: str = "analytical") -> np.ndarray | xr.DataArray:
    """Analytical times (ns) over a broadcast grid of sizes, bandwidths and latencies.

    Parameters
    ----------
    network : path, name, mapping or Network
        Fixes the topology shape; its bandwidths and latencies are the defaults.
    size : array_like of int
        Bytes (as in :func:`flowsim.simulate_collective`).
    bandwidth, latency : list of array_like (one per dimension) or array (..., ndims)
        Link bandwidth in GB/s (2^30 B/s) and latency in ns per dimension; broadcast with
        ``size`` and with each other (xarray DataArrays broadcast by name and come back
        as a DataArray).

    model : {"analytical", "flow"}
        ``"flow"`` runs the flow model point by point (each an :func:`estimate` call).

    Returns
    -------
    ndarray (or DataArray) of float64
        The time of every point, equal to ``simulate_collective(..., model=model)``
        at that point. Barrier synchronisation and per-dimension or flat phases are
        supported (not ``per_npu`` / ``doubleBinaryTree``, which are per-NPU DAGs).
    """
    net = load_network(network)
    if not isinstance(net, Network):
        raise ConfigError("estimate_batch: the batched model needs a multi-dimensional "
                          "network (Ring / FullyConnected / Switch); use estimate() on fabrics")
    sys_cfg = _system(system, net)
    name = _collective(collective)
    model = check_model(model)
    if sys_cfg.synchronization != "barrier" and model == "analytical":
        raise ConfigError("estimate_batch: 'step-synchronization: per_npu' needs the per-point "
                          "estimate() (the batched model covers barrier synchronisation)")
    cfg = net.config
    bws, bw_rows = _broadcast_dims(bandwidth, net.ndims, "bandwidth",
                                   np.array(cfg.bandwidth_gbps))
    lats, lat_rows = _broadcast_dims(latency, net.ndims, "latency", np.array(cfg.latency_ns))
    # a DataArray input means xarray is loaded: the numpy path does not import it
    if "xarray" in sys.modules:
        import xarray as xr
        if any(isinstance(v, xr.DataArray) for v in [size, *bws, *lats]):
            args = xr.broadcast(*[v if isinstance(v, xr.DataArray) else xr.DataArray(v)
                                  for v in [size, *bws, *lats]])
            values = estimate_batch(net, collective, args[0].values, sys_cfg,
                                    bandwidth=[a.values for a in args[1:1 + net.ndims]],
                                    latency=[a.values for a in args[1 + net.ndims:]],
                                    dims=dims, model=model)
            return xr.DataArray(values, coords=args[0].coords, dims=args[0].dims,
                                attrs={"units": "ns"})
    grid = _grid(size, bws, bw_rows, lats, lat_rows)
    if model == "flow":
        return _flow_points(net, sys_cfg, name, dims, grid)
    return _analytical_points(net, sys_cfg, name, _check_dims(net, dims), grid)


class _Grid(NamedTuple):
    """A broadcast grid of ``shape``, flattened: per point (or, with one row, for every point)
    the size in bytes (int64), the bandwidth in GB/s and the latency in ns per dimension
    (float64, shape (rows, ndims)); all C-contiguous."""

    shape: tuple[int, ...]
    size: np.ndarray
    gbps: np.ndarray
    latency: np.ndarray
    original_size: np.ndarray   # for error messages


def _grid(size: Any, bws: list, bw_rows: np.ndarray | None, lats: list,
          lat_rows: np.ndarray | None) -> _Grid:
    """The grid of the inputs without copying what need not be: a full-grid array is used as
    it is, an input that is the same at every point stays one row. (Their ranges are checked
    afterwards, in one jitted pass: :func:`_check_ranges`.)"""
    size = np.asarray(size)
    if size.dtype.kind not in "iu":
        raise _size_error(size)
    try:
        shape = np.broadcast_shapes(size.shape, *(np.shape(a) for a in (*bws, *lats)))
    except ValueError:   # a bad value is reported before a bad shape
        every = [np.ravel(np.asarray(a, np.float64)) for a in (*bws, *lats)]
        _check_ranges(_Grid((), _one_row(size), np.concatenate(every[:len(bws)])[:, None],
                            np.concatenate(every[len(bws):])[:, None], size))
        shapes = [np.shape(a) for a in (size, *bws, *lats)]
        raise ConfigError(f"estimate_batch: size, bandwidth and latency do not broadcast "
                          f"together (shapes {shapes})") from None
    sizes = _one_row(size) if size.size == 1 else \
        np.ascontiguousarray(np.broadcast_to(size, shape), np.int64).reshape(-1)
    return _Grid(shape, sizes, _dim_rows(bws, bw_rows, shape), _dim_rows(lats, lat_rows, shape),
                 size)


def _one_row(size: np.ndarray) -> np.ndarray:
    """Every size as int64 in one row (sizes past int64 wrap to negative: out of range)."""
    return np.ascontiguousarray(size, np.int64).reshape(-1)


def _dim_rows(columns: list[np.ndarray], rows: np.ndarray | None, shape: tuple[int, ...]
              ) -> np.ndarray:
    """Per-dimension values as an array (points, ndims), or (1, ndims) when they are the same
    at every point."""
    ndims = len(columns)
    if rows is not None and rows.shape[:-1] == shape:
        return np.ascontiguousarray(rows).reshape(-1, ndims)
    if all(np.size(c) == 1 for c in columns):
        return np.array([np.ravel(c)[0] for c in columns], np.float64).reshape(1, ndims)
    out = np.empty(shape + (ndims,))
    for d, column in enumerate(columns):
        out[..., d] = column
    return out.reshape(-1, ndims)


def _size_error(size: np.ndarray) -> ConfigError:
    return config_error("argument", "size", "whole numbers of bytes > 0, at most 2**53", size)


def _raise_for(status: int, grid: _Grid) -> None:
    """The error of a kernel's status bits (none for 0), the size's first."""
    from .system import _kernels as k
    if status & k.BAD_SIZE:
        raise _size_error(grid.original_size)
    # the ranges of config files: beyond them products overflow to inf or NaN
    if status & k.BAD_LINK:
        raise ConfigError(f"argument 'bandwidth'/'latency': bandwidths must be > 0 "
                          f"({BANDWIDTH_GBPS.minimum:g} to {BANDWIDTH_GBPS.maximum:g} GB/s) "
                          f"and latencies >= 0 (at most {LATENCY_NS.maximum:g} ns)")
    if status & k.BAD_CHUNKS:
        raise ConfigError("estimate_batch: sizes smaller than preferred-dataset-splits; "
                          "use estimate() for those points")
    if status & k.NOT_FINITE:   # the queues need finite times
        raise SimulationError("estimate_batch: a phase's time is not finite (inputs too "
                              "extreme for float64)")


def _check_ranges(grid: _Grid) -> None:
    from .system._kernels import check_ranges
    _raise_for(check_ranges(grid.size, grid.gbps, grid.latency, SIZE_BYTES.maximum,
                            BANDWIDTH_GBPS.minimum, BANDWIDTH_GBPS.maximum,
                            LATENCY_NS.maximum), grid)


def _flow_points(net: Network, system: SystemConfig, collective: str, dims: Any,
                 grid: _Grid) -> np.ndarray:
    """The flow model point by point (each an :func:`estimate` call)."""
    _check_ranges(grid)
    n = int(np.prod(grid.shape))
    sizes = np.broadcast_to(grid.size, (n,))
    # through bytes/ns and back, as the batched model's inputs always went
    gbps = np.broadcast_to(grid.gbps, (n, net.ndims)) * NETWORK_GBPS_TO_BYTES_PER_NS / \
        NETWORK_GBPS_TO_BYTES_PER_NS
    lat = np.broadcast_to(grid.latency, (n, net.ndims))
    out = np.empty(n)
    config = net.config.to_dict()
    for p in range(n):
        point = {**config, "bandwidth": gbps[p].tolist(), "latency": lat[p].tolist()}
        out[p] = estimate(point, collective, int(sizes[p]), system, "flow", dims=dims)
    return out.reshape(grid.shape)


def _analytical_points(net: Network, system: SystemConfig, collective: str,
                       dims: tuple[int, ...] | None, grid: _Grid) -> np.ndarray:
    """The analytical model at every point: one jitted pass that prices each chunk's phases
    with the cost model and runs the dimension queues."""
    from .system._kernels import batched_collective_times

    _check_ranges(grid)
    plan = _plan(net, system, collective, dims)
    out = np.empty(int(np.prod(grid.shape)))
    status = batched_collective_times(
        grid.size, grid.gbps, grid.latency, NETWORK_GBPS_TO_BYTES_PER_NS, system.splits,
        system.active_chunks, plan.phase_queue, plan.shared, plan.n_queues, plan.phase_data,
        plan.phase_passes, plan.phase_groups, plan.group_fraction, plan.group_reduce_fraction,
        plan.group_count, plan.pair_ptr, plan.pair_dim, plan.pair_hops, system.endpoint_delay_ns,
        -1.0 if system.local_mem_bw_gbps is None else system.local_mem_bw_gbps,
        system.local_reduction_delay_ns, out)
    _raise_for(status, grid)
    return out.reshape(grid.shape)


class _Plan(NamedTuple):
    """One chunk's phases as plain arrays for the kernel (see
    :func:`flowsim.system._kernels.batched_collective_times`): per phase its queue, bytes per
    chunk byte and step groups; per group of identical steps its fractions, count and the
    (dimension, hops) pairs that can be its slowest message; ``shared[i]``: phase ``i``'s
    queue serves another phase than 0 and ``i`` (their chunks interleave)."""

    phase_queue: np.ndarray
    shared: np.ndarray
    n_queues: int
    phase_data: np.ndarray
    phase_passes: np.ndarray
    phase_groups: np.ndarray
    group_fraction: np.ndarray
    group_reduce_fraction: np.ndarray
    group_count: np.ndarray
    pair_ptr: np.ndarray
    pair_dim: np.ndarray
    pair_hops: np.ndarray


@functools.lru_cache(maxsize=64)
def _plan(net: Network, system: SystemConfig, collective: str,
          dims: tuple[int, ...] | None) -> _Plan:
    """The arrays of :func:`_structure` (groups in the order of their first step); cached, as
    an optimizer calls with few points at a time (networks hash by identity, and equal
    configs load as the same network)."""
    phases = _structure(net, system, collective, dims)["phases"]
    keys = [ph["queue"] for ph in phases]
    groups = [(key, count) for ph in phases for key, count in ph["steps"].items()]
    pairs = [pair for (_, _, step_pairs), _ in groups for pair in step_pairs]
    later = [keys[1:].count(key) for key in keys]   # phases after the first on each queue
    return _Plan(
        phase_queue=np.array([sorted(set(keys)).index(k) for k in keys], np.int64),
        shared=np.array([i > 0 and n > 1 for i, n in enumerate(later)]),
        n_queues=len(set(keys)),
        phase_data=np.array([ph["data_factor"] for ph in phases], np.float64),
        phase_passes=np.array([ph["passes"] for ph in phases], np.float64),
        phase_groups=np.cumsum([0] + [len(ph["steps"]) for ph in phases], dtype=np.int64),
        group_fraction=np.array([key[0] for key, _ in groups], np.float64),
        group_reduce_fraction=np.array([key[1] for key, _ in groups], np.float64),
        group_count=np.array([count for _, count in groups], np.int64),
        pair_ptr=np.cumsum([0] + [len(key[2]) for key, _ in groups], dtype=np.int64),
        pair_dim=np.array([d for d, _ in pairs], np.int64),
        pair_hops=np.array([h for _, h in pairs], np.float64))


def _structure(net: Network, system: SystemConfig, collective: str,
               dims: tuple[int, ...] | None) -> dict:
    """Phases of one chunk with, per step, the (dimension, hops) pairs that can be slowest."""
    unit = 1 << 20
    phases = collective_phases(net, system, collective, float(unit), dims=dims)
    if any(base_per_npu(ph) for ph in phases):
        raise ConfigError("estimate_batch: doubleBinaryTree runs per NPU; use estimate()")
    schedule = Schedule(net, system, "analytical", replicate=True)
    out = []
    for phase in phases:
        steps = schedule.shapes.steps(phase)
        templates = schedule.shapes.templates(phase)
        step_info: dict[tuple, int] = {}
        for step, template in zip(steps, templates):
            indptr, links = template.indptr, template.links
            hops = np.diff(indptr)
            first_link = links[indptr[:-1][hops > 0]]
            pairs = sorted({(int(net.link_dim[link]), int(h))
                            for link, h in zip(first_link, hops[hops > 0])})
            # keep, per dimension, the largest hop count (it is the slowest there)
            best: dict[int, int] = {}
            for d, h in pairs:
                best[d] = max(best.get(d, 0), h)
            key = (step.fraction, step.reduce_fraction, tuple(sorted(best.items())))
            step_info[key] = step_info.get(key, 0) + 1  # identical steps are timed once
        out.append({"queue": phase.queue, "data_factor": phase.data / unit,
                    "passes": phase.delay_passes, "steps": step_info})
    return {"phases": out}


def base_per_npu(phase) -> bool:
    from .collectives import base_algorithm
    return base_algorithm(phase.algorithm).per_npu_only

