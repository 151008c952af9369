"""Units and long names of every variable and coordinate flowsim writes: the one place.

Datasets follow the CF conventions where they fit (``Conventions = "CF-1.10"``): every
numeric variable and coordinate has a ``units`` attribute (``"1"`` for counts, indices and
ratios; text variables have none, as CF prescribes) and every variable and coordinate a
``long_name``. Time is in ns, sizes in bytes; ASTRA-sim's network "GB/s" is 2**30 bytes/s,
written ``GiB/s``, its system "GB/s" (``local-mem-bw``) 1e9 bytes/s, written ``GB/s``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .._version import __version__

if TYPE_CHECKING:
    import xarray as xr

#: CF version the Datasets follow.
CONVENTIONS = "CF-1.10"

#: (units, long_name) by variable or coordinate name; units ``None``: text.
VARIABLES: dict[str, tuple[str | None, str]] = {
    # collectives
    "time_ns": ("ns", "time when the run ended (last op and collective finished)"),
    "npu_finish_ns": ("ns", "time each NPU finished its part of the collective"),
    "link_bytes": ("bytes", "bytes each link carried"),
    "link_busy_ns": ("ns", "time each link carried data"),
    "link_utilization": ("1", "link bytes over link bandwidth times run time"),
    "dim_bytes": ("bytes", "bytes the links of each dimension carried"),
    "dim_busy_ns": ("ns", "time some link of each dimension carried data"),
    "npu": ("1", "NPU id"),
    "link": ("1", "link id"),
    "link_src": ("1", "node a link leaves (NPU ids first, then switches)"),
    "link_dst": ("1", "node a link enters (NPU ids first, then switches)"),
    "link_dim": ("1", "logical dimension of a link (-1: none, fabrics)"),
    "link_bandwidth": ("bytes/ns", "link bandwidth"),
    "dim": ("1", "logical dimension (dimension 0 varies fastest in NPU ids)"),
    "topology": (None, "building block of each dimension"),
    "npus_count": ("1", "NPUs per dimension"),
    "bandwidth_gbps": ("GiB/s", "link bandwidth per dimension (ASTRA-sim GB/s, 2**30 B/s; "
                                "NaN where links differ)"),
    "latency_ns": ("ns", "link latency per dimension (NaN where links differ)"),
    "algorithm": (None, "collective algorithm per dimension"),
    # training runs
    "finish_ns": ("ns", "time each NPU finished its last op or collective"),
    "compute_ns": ("ns", "compute time per NPU"),
    "exposed_comm_ns": ("ns", "collective communication per NPU not hidden by compute "
                              "(blocked, then collectives still running after its last op)"),
    "bubble_ns": ("ns", "pipeline bubble per NPU: time its compute waited on point-to-point "
                        "receives"),
    "blocked_comm_ns": ("ns", "time per NPU an op waited for communication (bubble included)"),
    "idle_ns": ("ns", "rest of each NPU's time: finish - compute - exposed communication - "
                      "bubble"),
    "layer_compute_ns": ("ns", "compute per layer and pass, mean over the NPUs running "
                               "the layer"),
    "layer_exposed_comm_ns": ("ns", "exposed communication per layer and pass, mean over "
                                    "the NPUs running the layer"),
    "layer_comm_ns": ("ns", "communication per layer and pass (issue to finish plus update "
                            "delay), mean over the NPUs running the layer"),
    "layer": (None, "layer name ('(other)': ops of no layer)"),
    "layer_npus": ("1", "NPUs that ran ops of the layer (per-layer values are means over "
                        "them)"),
    "pass": (None, "training pass: fwd (forward), ig (input gradient), wg (weight "
                   "gradient)"),
    # sweeps
    "total_link_bytes": ("bytes", "bytes all links carried"),
    "max_link_utilization": ("1", "highest link utilization"),
    "flows": ("1", "flows the run stands for"),
    "error": (None, "why the point has no result ('' when it ran)"),
    "point": ("1", "grid point index (C order over the axes)"),
}

#: (units, quantity) of sweep axes by the config key they vary (``[i]`` indices dropped).
AXIS_KEYS: dict[str, tuple[str | None, str]] = {
    "size": ("bytes", "collective size per NPU"),
    "collective": (None, "collective type"),
    "model": (None, "network model"),
    "dims": (None, "dimensions the collective spans"),
    "root": ("1", "root NPU"),
    "iterations": ("1", "training iterations"),
    "network.bandwidth": ("GiB/s", "link bandwidth (ASTRA-sim GB/s, 2**30 B/s)"),
    "network.latency": ("ns", "link latency"),
    "network.npus_count": ("1", "NPUs per dimension"),
    "network.topology": (None, "building block of a dimension"),
    "system.endpoint-delay": ("ns", "endpoint delay per message"),
    "system.local-reduction-delay": ("ns", "local reduction delay per step"),
    "system.local-mem-bw": ("GB/s", "local memory bandwidth (1e9 B/s)"),
    "system.peak-perf": ("TFLOP/s", "peak compute"),
    "workload.peak_tflops": ("TFLOP/s", "peak compute"),
    "workload.memory_bandwidth_GBps": ("GB/s", "memory bandwidth (1e9 B/s)"),
}

_INDEX = re.compile(r"\[\d+\]$")


def set_units(ds: xr.Dataset) -> xr.Dataset:
    """Write ``units`` and ``long_name`` of every variable and coordinate flowsim knows
    (anything else ending in ``_ns`` is in ns), and the Dataset's ``Conventions``."""
    for name in ds.variables:
        units, long_name = VARIABLES.get(str(name), (None, None))
        if units is None and str(name).endswith("_ns"):
            units = "ns"
        _describe(ds, name, units, long_name)
    return set_conventions(ds)


def set_axis_units(ds: xr.Dataset, coord: str, key: str) -> None:
    """Units and long name of a sweep coordinate that varies config ``key``."""
    plain = _INDEX.sub("", key)
    units, quantity = AXIS_KEYS.get(plain, (None, None))
    numeric = ds[coord].dtype.kind in "iuf"
    if units is None and numeric:
        units = "1"   # the remaining numeric keys are counts and factors
    _describe(ds, coord, units if numeric else None,
              f"{quantity or plain} (sweep axis {key})")


def set_conventions(ds: xr.Dataset) -> xr.Dataset:
    """The Dataset-level attributes CF asks for."""
    ds.attrs.setdefault("Conventions", CONVENTIONS)
    ds.attrs.setdefault("source", f"flowsim {__version__}")
    return ds


def _describe(ds: xr.Dataset, name, units: str | None, long_name: str | None) -> None:
    attrs = ds[name].attrs
    numeric = ds[name].dtype.kind in "iufb"
    if units is not None and numeric:
        attrs["units"] = units
    elif numeric and "units" not in attrs:
        attrs["units"] = "1"
    if long_name is not None:
        attrs["long_name"] = long_name
    elif "long_name" not in attrs:
        attrs["long_name"] = str(name).replace("_", " ")
