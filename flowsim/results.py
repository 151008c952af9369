"""Where xarray objects are built: plain arrays from the engine in, Datasets out."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from ._version import __version__

UNITS = {"time_ns": "ns", "npu_finish_ns": "ns", "link_bytes": "bytes", "link_busy_ns": "ns",
         "link_utilization": "1", "dim_bytes": "bytes", "dim_busy_ns": "ns",
         "link_bandwidth": "bytes/ns", "bandwidth_gbps": "GB/s (2^30 B/s)", "latency_ns": "ns"}


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals ``[starts[i], ends[i])``."""
    if starts.size == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # a new disjoint block begins where an interval starts after everything before it ended
    new_block = np.concatenate([[True], s[1:] > reach[:-1]])
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_start.size)
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


def collective_dataset(*, network, system, collective: str, size: int, model: str,
                       algorithms: tuple[str, ...], time_ns: float, npu_finish_ns: np.ndarray,
                       link_bytes: np.ndarray, link_busy_ns: np.ndarray,
                       dim_bytes: np.ndarray, dim_busy_ns: np.ndarray, stats: dict) -> xr.Dataset:
    """Assemble the Dataset of one collective run (see :func:`flowsim.simulate_collective`)."""
    cfg = network.config
    per_link = len(cfg.bandwidth_gbps) != network.ndims or cfg.topology[0] == "Fabric"
    dim_bandwidth = np.full(network.ndims, np.nan) if per_link else np.array(cfg.bandwidth_gbps)
    dim_latency = np.full(network.ndims, np.nan) if per_link else np.array(cfg.latency_ns)
    utilization = link_bytes / (network.link_bandwidth * time_ns) if time_ns > 0 \
        else np.zeros_like(link_bytes)
    ds = xr.Dataset(
        data_vars={
            "time_ns": ((), float(time_ns)),
            "npu_finish_ns": (("npu",), npu_finish_ns),
            "link_bytes": (("link",), link_bytes),
            "link_busy_ns": (("link",), link_busy_ns),
            "link_utilization": (("link",), utilization),
            "dim_bytes": (("dim",), dim_bytes),
            "dim_busy_ns": (("dim",), dim_busy_ns),
        },
        coords={
            "npu": np.arange(network.npus),
            "link": np.arange(network.num_links),
            "link_src": (("link",), network.link_src),
            "link_dst": (("link",), network.link_dst),
            "link_dim": (("link",), network.link_dim),
            "link_bandwidth": (("link",), network.link_bandwidth),
            "dim": np.arange(network.ndims),
            "topology": (("dim",), np.array(cfg.topology, dtype=str)),
            "npus_count": (("dim",), np.array(cfg.npus_count)),
            "bandwidth_gbps": (("dim",), dim_bandwidth),
            "latency_ns": (("dim",), dim_latency),
            "algorithm": (("dim",), np.array(algorithms, dtype=str)),
        },
        attrs={
            "collective": collective,
            "size_bytes": int(size),
            "model": model,
            "npus": int(network.npus),
            "chunks": int(max(1, min(system.splits, size))),
            "active_chunks_per_dimension": int(system.active_chunks),
            "synchronization": system.synchronization,
            "collective_optimization": system.collective_optimization,
            "flowsim_version": __version__,
            "stats": json.dumps(stats),
        },
    )
    for name, unit in UNITS.items():
        if name in ds.variables:
            ds[name].attrs["units"] = unit
    return ds


def write_dataset(ds: xr.Dataset, path: str) -> None:
    """Write a Dataset atomically (temporary file, then rename): NetCDF via scipy."""
    from ._io import atomic_output

    clean = ds.copy()
    clean.attrs = {k: v for k, v in ds.attrs.items() if not k.startswith("_")}
    with atomic_output(path) as tmp:
        clean.to_netcdf(tmp, engine="scipy")
