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
    efficiency: 0.5              # in (0, 1]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import config_error, unknown_key_error

#: The keys of a roofline mapping and the unit factor of each.
ROOFLINE_KEYS = {"peak_tflops": 1e12, "memory_bandwidth_GBps": 1e9, "efficiency": 1.0}


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
        _check_positive("argument", "peak_flops", self.peak_flops)
        _check_positive("argument", "mem_bandwidth", self.mem_bandwidth)
        _check_efficiency("argument", "efficiency", self.efficiency)

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
    if not isinstance(mapping, Mapping):
        raise config_error(source, key, "a mapping with keys " + ", ".join(ROOFLINE_KEYS),
                           mapping)
    for name in mapping:
        if name not in ROOFLINE_KEYS:
            raise unknown_key_error(source, f"{key}.{name}",
                                    [f"{key}.{k}" for k in ROOFLINE_KEYS])
    fallback = {"peak_tflops": default.peak_flops / 1e12 if default else ...,
                "memory_bandwidth_GBps": default.mem_bandwidth / 1e9 if default else ...,
                "efficiency": default.efficiency if default else 1.0}
    values = {}
    for name, unit in ROOFLINE_KEYS.items():
        value = mapping.get(name, fallback[name])
        if name == "efficiency":
            values[name] = _check_efficiency(source, f"{key}.{name}", value)
        else:
            values[name] = _check_positive(source, f"{key}.{name}", value) * unit
    return Roofline(values["peak_tflops"], values["memory_bandwidth_GBps"],
                    values["efficiency"])


def _is_number(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.number))
            and math.isfinite(value))


def _check_positive(source: str, key: str, value: Any) -> float:
    if value is ... or not _is_number(value) or value <= 0:
        raise config_error(source, key, "a finite number > 0", value)
    return float(value)


def _check_efficiency(source: str, key: str, value: Any) -> float:
    if value is ... or not _is_number(value) or not 0 < value <= 1:
        raise config_error(source, key, "a number in (0, 1]", value)
    return float(value)
