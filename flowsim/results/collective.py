"""The Dataset of one collective run (see :func:`flowsim.simulate_collective`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from .build import numpy_dataset
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


@dataclass
class CollectiveRecord:
    """What a collective run measured, as plain arrays (no xarray needed to hold or read it).

    :func:`flowsim.system.run_collective` returns it; :meth:`to_dataset` is what
    :func:`flowsim.simulate_collective` returns.

    Attributes
    ----------
    network, system : the Network (or FabricNetwork) and SystemConfig that ran
    collective : str
    size : int
        Bytes per NPU (as in ``simulate_collective``).
    model : str
    algorithms : tuple of str
        Per logical dimension.
    time_ns : float
        When the last chunk finished.
    npu_finish_ns : ndarray, shape (npus,)
    link_bytes, link_busy_ns : ndarray, shape (links,)
    dim_bytes, dim_busy_ns : ndarray, shape (ndims,)
        ``dim_bytes`` is NaN on fabrics (their links belong to no logical dimension).
    stats : SimulationStats
    """

    network: Any
    system: Any
    collective: str
    size: int
    model: str
    algorithms: tuple[str, ...]
    time_ns: float
    npu_finish_ns: np.ndarray
    link_bytes: np.ndarray
    link_busy_ns: np.ndarray
    dim_bytes: np.ndarray
    dim_busy_ns: np.ndarray
    stats: SimulationStats

    def summary(self) -> dict[str, Any]:
        """The run's headline numbers as JSON-ready Python values (what ``flowsim
        collective --json`` prints, besides the names of its inputs)."""
        cfg = self.network.config
        return {
            "time_ns": float(self.time_ns),
            "model": self.model,
            "collective": self.collective,
            "size_bytes": int(self.size),
            "npus": int(self.network.npus),
            "topology": [str(t) for t in cfg.topology],
            "npus_count": [int(n) for n in cfg.npus_count],
            "algorithm": list(self.algorithms),
            # fabrics: links belong to no logical dimension (NaN here, null in JSON)
            "dim_bytes": [float(b) if np.isfinite(b) else None for b in self.dim_bytes],
            "dim_busy_ns": [float(b) for b in self.dim_busy_ns],
            "stats": self.stats.as_dict(),
        }

    def to_dataset(self) -> xr.Dataset:
        """The run as an xarray Dataset (see :func:`flowsim.simulate_collective`)."""
        return collective_dataset(self)


def link_utilization(record: CollectiveRecord) -> np.ndarray:
    """Each link's bytes over what it could carry in the collective's time (zeros for a
    collective that took no time)."""
    if record.time_ns > 0:
        return record.link_bytes / (record.network.link_bandwidth * record.time_ns)
    return np.zeros_like(record.link_bytes)


def collective_dataset(record: CollectiveRecord) -> xr.Dataset:
    """Assemble the Dataset of one collective run from its record."""
    network, system, size = record.network, record.system, record.size
    time_ns, link_bytes = record.time_ns, record.link_bytes
    cfg = network.config
    dim_bandwidth, dim_latency, _ = per_dimension_config(network)
    utilization = link_utilization(record)
    ds = numpy_dataset(
        data_vars={
            "time_ns": ((), float(time_ns)),
            "npu_finish_ns": (("npu",), record.npu_finish_ns),
            "link_bytes": (("link",), link_bytes),
            "link_busy_ns": (("link",), record.link_busy_ns),
            "link_utilization": (("link",), utilization),
            "dim_bytes": (("dim",), record.dim_bytes),
            "dim_busy_ns": (("dim",), record.dim_busy_ns),
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
            "algorithm": (("dim",), np.array(record.algorithms, dtype=str)),
        },
        attrs={
            "collective": record.collective,
            "size_bytes": int(size),
            "model": record.model,
            "npus": int(network.npus),
            "chunks": int(max(1, min(system.splits, size))),
            "active_chunks_per_dimension": int(system.active_chunks),
            "synchronization": system.synchronization,
            "ring_delays": system.ring_delays,
            "collective_optimization": system.collective_optimization,
            "flowsim_version": __version__,
            **to_attrs(record.stats),
        },
    )
    return set_units(ds)
