"""The estimator API for optimizers: one collective's time in microseconds to milliseconds,
and a batched analytical form over arrays of sizes, bandwidths and latencies.

``estimate``
    One point, either model; networks and system configs are cached between calls, and no
    Dataset is built.
``estimate_batch``
    A broadcast grid: the analytical model vectorized (or, with ``model="flow"``, the flow
    model point by point). The collective's structure (chunks, phases,
    steps, hop counts) is derived once; every grid point then gets its phase durations from
    one numpy expression, and a jitted loop runs ASTRA-sim's dimension queues per point.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import xarray as xr

from ._validate import BANDWIDTH_GBPS, LATENCY_NS, SIZE_BYTES
from .collectives import canonical_collective
from .errors import ConfigError, SimulationError, config_error, public_api
from .network.engine import check_model
from .system import cost
from .system.budget import check_max_work, check_work, collective_work
from .system.collective import _check_dims, _check_npu
from .system.config import SystemConfig
from .system.load import load_system
from .system.phases import assign_variants, chunk_sizes, collective_phases
from .system.scheduler import Schedule, can_replicate
from .topology import Network, load_network
from .units import NETWORK_GBPS_TO_BYTES_PER_NS, parse_size


@functools.lru_cache(maxsize=256)
def _system_from_key(key: str) -> SystemConfig:
    return load_system(json.loads(key)) if key.startswith("{") else load_system(key)


def _system(system: Any) -> SystemConfig:
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
    sys_cfg = _system(system)
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


def _broadcast_dims(value: Any, ndims: int, name: str, default: np.ndarray) -> list[np.ndarray]:
    """Per-dimension arrays from None (the network's values), a scalar-per-dim list, or an
    array whose last axis is the dimension."""
    if value is None:
        return [np.asarray(v, np.float64) for v in default]
    if isinstance(value, (list, tuple)):
        if len(value) != ndims:
            raise config_error("argument", name, f"{ndims} values (one per dimension)", value)
        # xarray objects are kept as they are: they broadcast by dimension name
        return [v if hasattr(v, "dims") else np.asarray(v, np.float64) for v in value]
    arr = np.asarray(value, np.float64)
    if arr.shape[-1:] != (ndims,):
        raise config_error("argument", name,
                           f"an array whose last axis has length {ndims} (one per dimension)",
                           f"shape {arr.shape}")
    return [arr[..., d] for d in range(ndims)]


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
    sys_cfg = _system(system)
    name = _collective(collective)
    model = check_model(model)
    if sys_cfg.synchronization != "barrier" and model == "analytical":
        raise ConfigError("estimate_batch: 'step-synchronization: per_npu' needs the per-point "
                          "estimate() (the batched model covers barrier synchronisation)")
    cfg = net.config
    bws = _broadcast_dims(bandwidth, net.ndims, "bandwidth", np.array(cfg.bandwidth_gbps))
    lats = _broadcast_dims(latency, net.ndims, "latency", np.array(cfg.latency_ns))
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
    shape, sizes, bw, lat = _grid(size, bws, lats)
    if model == "flow":
        out = np.empty(sizes.size)
        config = net.config.to_dict()
        gbps = bw / NETWORK_GBPS_TO_BYTES_PER_NS
        for p in range(sizes.size):
            point = {**config, "bandwidth": gbps[p].tolist(), "latency": lat[p].tolist()}
            out[p] = estimate(point, name, int(sizes[p]), sys_cfg, "flow", dims=dims)
        return out.reshape(shape)
    return _analytical_points(net, sys_cfg, name, _check_dims(net, dims), sizes, bw,
                              lat).reshape(shape)


def _grid(size: Any, bws: list, lats: list) -> tuple[tuple[int, ...], np.ndarray, np.ndarray,
                                                      np.ndarray]:
    """Validated, broadcast grid: its shape, and per point the size (bytes), and per point and
    dimension the bandwidth (bytes/ns) and latency (ns)."""
    size = np.asarray(size)
    if size.dtype.kind not in "iu" or np.any(size < 1) or np.any(size > SIZE_BYTES.maximum):
        raise config_error("argument", "size", "whole numbers of bytes > 0, at most 2**53",
                           size)
    # the ranges of config files: beyond them products overflow to inf or NaN
    if any(np.any(~((b >= BANDWIDTH_GBPS.minimum) & (b <= BANDWIDTH_GBPS.maximum)))
           for b in bws) or any(np.any(~((la >= 0) & (la <= LATENCY_NS.maximum)))
                                for la in lats):
        raise ConfigError(f"argument 'bandwidth'/'latency': bandwidths must be > 0 "
                          f"({BANDWIDTH_GBPS.minimum:g} to {BANDWIDTH_GBPS.maximum:g} GB/s) "
                          f"and latencies >= 0 (at most {LATENCY_NS.maximum:g} ns)")
    try:
        arrays = np.broadcast_arrays(size, *bws, *lats)
    except ValueError:
        shapes = [np.shape(a) for a in (size, *bws, *lats)]
        raise ConfigError(f"estimate_batch: size, bandwidth and latency do not broadcast "
                          f"together (shapes {shapes})") from None
    ndims = len(bws)
    sizes = arrays[0].ravel().astype(np.int64)
    bw = np.stack([a.ravel() for a in arrays[1:1 + ndims]], axis=1) * \
        NETWORK_GBPS_TO_BYTES_PER_NS
    lat = np.stack([a.ravel() for a in arrays[1 + ndims:]], axis=1)
    return arrays[0].shape, sizes, bw, lat


def _analytical_points(net: Network, system: SystemConfig, collective: str,
                       dims: tuple[int, ...] | None, sizes: np.ndarray, bw: np.ndarray,
                       lat: np.ndarray) -> np.ndarray:
    """The analytical model at every point: phase lengths from the cost model, then the
    dimension queues (a jitted loop) over the chunks."""
    from .system._kernels import queue_schedule

    structure = _structure(net, system, collective, dims)
    # chunk sizes per point: floor or floor + 1 (the first size % splits chunks get +1)
    n_chunks = np.minimum(system.splits, sizes)
    if np.any(n_chunks != n_chunks.flat[0]):
        raise ConfigError("estimate_batch: sizes smaller than preferred-dataset-splits; "
                          "use estimate() for those points")
    n_chunks = int(n_chunks.flat[0])
    base, extra = np.divmod(sizes, n_chunks)
    phases = structure["phases"]
    durations = np.empty((sizes.size, n_chunks, len(phases)))
    for i, phase in enumerate(phases):
        small = _phase_duration(phase, base.astype(np.float64), bw, lat, system)
        large = _phase_duration(phase, (base + 1).astype(np.float64), bw, lat, system)
        durations[:, :, i] = np.where(np.arange(n_chunks)[None, :] < extra[:, None],
                                      large[:, None], small[:, None])
    keys = [ph["queue"] for ph in phases]
    queues = np.array([sorted(set(keys)).index(k) for k in keys], np.int64)
    if not np.all(np.isfinite(durations)):   # the kernel's loop needs finite times
        raise SimulationError("estimate_batch: a phase's time is not finite (inputs too "
                              "extreme for float64)")
    return queue_schedule(durations, queues, int(queues.max()) + 1, system.active_chunks)


def _phase_duration(phase: dict, chunk: np.ndarray, bw: np.ndarray, lat: np.ndarray,
                    system: SystemConfig) -> np.ndarray:
    """A phase's length at every grid point: the cost model (:mod:`flowsim.system.cost`)
    broadcast over the points, identical steps counted once and multiplied."""
    data = chunk * phase["data_factor"]
    durations, posts, counts = [], [], []
    for (frac, rfrac, pairs), count in phase["steps"].items():
        nbytes = frac * data
        slowest = None
        for d, h in pairs:
            t = cost.message_ns(h * lat[:, d], 1.0 / bw[:, d], nbytes)
            slowest = t if slowest is None else np.maximum(slowest, t)
        durations.append(slowest)
        posts.append(system.endpoint_delay_ns + cost.reduction_ns(
            rfrac * data, system.local_mem_bw_gbps, system.local_reduction_delay_ns))
        counts.append(count)
    return cost.phase_ns_grouped(np.full(chunk.shape, system.endpoint_delay_ns), durations,
                                 posts, counts)


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
                    "steps": step_info})
    return {"phases": out}


def base_per_npu(phase) -> bool:
    from .collectives import base_algorithm
    return base_algorithm(phase.algorithm).per_npu_only

