"""Units of every variable and coordinate flowsim writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

#: units by variable or coordinate name; anything ending in ``_ns`` is in ns
UNITS = {"npu_finish_ns": "ns", "link_bytes": "bytes", "link_busy_ns": "ns",
         "link_utilization": "1", "dim_bytes": "bytes", "dim_busy_ns": "ns",
         "link_bandwidth": "bytes/ns", "bandwidth_gbps": "GB/s (2^30 B/s)", "latency_ns": "ns"}


def set_units(ds: xr.Dataset) -> xr.Dataset:
    """Write the ``units`` attribute of every variable flowsim knows the unit of."""
    for name in ds.variables:
        unit = UNITS.get(str(name)) or ("ns" if str(name).endswith("_ns") else None)
        if unit is not None:
            ds[name].attrs["units"] = unit
    return ds
