"""The Dataset of one collective run (see :func:`flowsim.simulate_collective`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._version import __version__
from .stats import SimulationStats, to_attrs
from .units import set_units

if TYPE_CHECKING:
    import xarray as xr


def per_dimension_config(network) -> tuple[np.ndarray, np.ndarray, bool]:
    """Bandwidth (GB/s) and latency (ns) per logical dimension, NaN where links differ within
    a dimension (fabrics, ASTRA-sim 1.0 networks with per-link values); and whether they do."""
    cfg = network.config
    per_link = len(cfg.bandwidth_gbps) != network.ndims or cfg.topology[0] == "Fabric"
    bandwidth = np.full(network.ndims, np.nan) if per_link else np.array(cfg.bandwidth_gbps)
    latency = np.full(network.ndims, np.nan) if per_link else np.array(cfg.latency_ns)
    return bandwidth, latency, per_link


def collective_dataset(*, network, system, collective: str, size: int, model: str,
                       algorithms: tuple[str, ...], time_ns: float, npu_finish_ns: np.ndarray,
                       link_bytes: np.ndarray, link_busy_ns: np.ndarray,
                       dim_bytes: np.ndarray, dim_busy_ns: np.ndarray,
                       stats: SimulationStats) -> xr.Dataset:
    """Assemble the Dataset of one collective run from the arrays the engine returns."""
    import xarray as xr

    cfg = network.config
    dim_bandwidth, dim_latency, _ = per_dimension_config(network)
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
            **to_attrs(stats),
        },
    )
    return set_units(ds)
