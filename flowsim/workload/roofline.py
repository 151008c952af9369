"""A roofline compute model: the time of a kernel from its FLOPs and the bytes it moves.

A kernel of ``F`` floating-point operations that reads and writes ``M`` bytes of memory takes

    time = max(F / (peak_flops * efficiency), M / (mem_bandwidth * efficiency))

the larger of its compute-bound and memory-bound times (Williams, Waterman and Patterson,
"Roofline", CACM 2009). ``efficiency`` scales both roofs: the fraction of peak a real kernel
reaches.

Config keys (a nested ``roofline:`` mapping in a generator YAML)::

    peak_tflops: 312             # peak FLOP/s in units of 1e12
    memory_bandwidth_GBps: 2039  # memory bandwidth in GB/s with GB = 1e9 bytes (as vendors
                                 # quote it; unlike the network's "GB/s", which is 2**30)
    efficiency: 0.5              # from 1e-6 to 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import (
    REQUIRED,
    Quantity,
    as_mapping,
    as_number,
    check_unknown_keys,
    read_number,
)
from ..errors import config_error
from .kernels import HostCopy

#: The keys of a roofline mapping and the unit factor of each.
ROOFLINE_KEYS = {"peak_tflops": 1e12, "memory_bandwidth_GBps": 1e9, "efficiency": 1.0}
#: Sane ranges: peak compute from 1 kFLOP/s to 1e12 TFLOP/s, memory bandwidth from 1 KB/s to
#: 1 ZB/s (high enough to make a roof irrelevant), efficiency from 1e-6 to 1 (a smaller one
#: would divide a time by nearly nothing).
QUANTITIES = {"peak_tflops": Quantity("TFLOP/s", 1e-9, 1e12, positive=True),
              "memory_bandwidth_GBps": Quantity("GB/s", 1e-6, 1e12, positive=True),
              "efficiency": Quantity("", 1e-6, 1.0, positive=True)}


@dataclass(frozen=True)
class Roofline:
    """Peak compute and memory bandwidth of one NPU (hashable).

    Attributes
    ----------
    peak_flops : float
        Peak floating-point operations per second (FLOP/s).
    mem_bandwidth : float
        Memory bandwidth in bytes per second.
    efficiency : float
        Fraction of both peaks that kernels reach, in (0, 1].
    """

    peak_flops: float
    mem_bandwidth: float
    efficiency: float = 1.0

    def __post_init__(self) -> None:
        # the arguments in FLOP/s and bytes/s: the ranges of QUANTITIES in those units
        for name, key, unit, label in (("peak_flops", "peak_tflops", 1e12, "FLOP/s"),
                                       ("mem_bandwidth", "memory_bandwidth_GBps", 1e9,
                                        "bytes/s"),
                                       ("efficiency", "efficiency", 1.0, "")):
            q = QUANTITIES[key]
            as_number(getattr(self, name), source="argument", key=name, quantity=Quantity(
                label, q.minimum * unit, q.maximum * unit, positive=True))

    def time_ns(self, flops: Any, mem_bytes: Any) -> Any:
        """Roofline time in ns of kernels of ``flops`` FLOPs moving ``mem_bytes`` bytes.

        Parameters
        ----------
        flops, mem_bytes : float or array_like
            Broadcast against each other.

        Returns
        -------
        float or numpy.ndarray of float64
            A float for scalar inputs, else an array of the broadcast shape.
        """
        compute_s = np.asarray(flops, dtype=np.float64) / (self.peak_flops * self.efficiency)
        memory_s = np.asarray(mem_bytes, dtype=np.float64) / (self.mem_bandwidth
                                                              * self.efficiency)
        time = np.maximum(compute_s, memory_s) * 1e9
        return float(time) if time.ndim == 0 else time

    def work_ns(self, flops: float, mem_bytes: float) -> float:
        """Time of one op of ``flops`` FLOPs moving ``mem_bytes`` bytes (ns)."""
        return float(self.time_ns(flops, mem_bytes))

    def kernels_ns(self, kernels) -> float:
        """Time of kernels run one after the other, each on the roofline of its FLOPs and
        bytes (:mod:`flowsim.workload.kernels`), ns; a copy to the host needs a device's
        host link (:class:`~flowsim.workload.kernels.HostCopy`), which a roofline has not."""
        if any(isinstance(k, HostCopy) for k in kernels):
            raise config_error("compute", "device", "a device preset (copies to host memory "
                               "take its host link's bandwidth; a roofline has none)",
                               "a roofline")
        return sum(self.work_ns(k.flops, k.bytes) for k in kernels)


def parse_roofline(mapping: Any, source: str, *, key: str = "roofline",
                   default: Roofline | None = None) -> Roofline:
    """Validate a roofline mapping (keys ``peak_tflops``, ``memory_bandwidth_GBps`` in GB/s
    with GB = 1e9 bytes, ``efficiency``) and return a :class:`Roofline`.

    Parameters
    ----------
    mapping : Mapping or Roofline
        The roofline keys (a :class:`Roofline` is returned as it is).
    source : str
        Where the mapping came from (a file path, ``"<dict>"``), for error messages.
    key : str
        The key holding the mapping, prefixed to the names in error messages.
    default : Roofline, optional
        Supplies the keys the mapping leaves out; without it ``peak_tflops`` and
        ``memory_bandwidth_GBps`` are required and ``efficiency`` defaults to 1.

    Raises
    ------
    ConfigError
        Not a mapping, an unknown key, a missing key, or a value that is not a positive
        finite number (efficiency: in (0, 1]).
    """
    if isinstance(mapping, Roofline):
        return mapping
    as_mapping(mapping, source=source, key=key,
               what="a mapping with keys " + ", ".join(ROOFLINE_KEYS))
    check_unknown_keys(mapping, ROOFLINE_KEYS, source=source, prefix=f"{key}.")
    fallback = {"peak_tflops": default.peak_flops / 1e12 if default else REQUIRED,
                "memory_bandwidth_GBps": default.mem_bandwidth / 1e9 if default else REQUIRED,
                "efficiency": default.efficiency if default else 1.0}
    values = {name: read_number(mapping, name, source=source, prefix=f"{key}.",
                                default=fallback[name], quantity=QUANTITIES[name]) * unit
              for name, unit in ROOFLINE_KEYS.items()}
    return Roofline(values["peak_tflops"], values["memory_bandwidth_GBps"],
                    values["efficiency"])
