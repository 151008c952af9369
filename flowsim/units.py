"""Units and their conversions.

Internally flowsim measures time in ns (float64), sizes in bytes and bandwidth in bytes/ns.
Configs follow ASTRA-sim: network bandwidth is "GB/s" with GB = 2**30 bytes
(``bw * 2**30 / 1e9`` bytes/ns), and the system json's ``local-mem-bw`` is GB/s with GB = 1e9.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping

from ._validate import DURATION_NS, SIZE_BYTES, as_int, as_number
from .errors import ConfigError, ConfigTypeError, config_error

#: bytes per ns in one "GB/s" of an ASTRA-sim network config (GB = 2**30 B).
NETWORK_GBPS_TO_BYTES_PER_NS = float(1 << 30) / 1e9

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_TIME_UNITS = {"": 1.0, "ns": 1.0, "us": 1e3, "\u00b5s": 1e3, "ms": 1e6, "s": 1e9}
_TIME_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z\u00b5]*)\s*$")


def network_bandwidth_to_bytes_per_ns(gbps: float) -> float:
    """Convert an ASTRA-sim network bandwidth in "GB/s" (2**30 B/s) to bytes/ns."""
    return gbps * NETWORK_GBPS_TO_BYTES_PER_NS


def parse_size(value: object, *, source: str | None = None, key: str = "size",
               allow_zero: bool = False) -> int:
    """Parse a size in bytes: an integer, or a string such as ``"64MiB"``, ``"1GB"``, ``"4096"``.

    Binary prefixes (KiB, MiB, GiB, and the bare K, M, G) are powers of 1024; KB, MB, GB are
    powers of 1000. The result must be a whole, positive number of bytes (or zero when
    ``allow_zero``), at most :data:`flowsim._validate.SIZE_BYTES` (2**53 bytes, 8 PiB: sizes
    stay exact in float64).
    """
    bound = ">= 0" if allow_zero else "> 0"
    expected = f"a whole number of bytes {bound} (e.g. 1048576, '64MiB', '1GB')"
    number = _with_unit(value, _SIZE_PATTERN, _SIZE_UNITS, source, key, expected)
    try:
        size = as_int(number, source=source, key=key, minimum=0 if allow_zero else 1,
                      maximum=int(SIZE_BYTES.maximum))
    except ConfigError as exc:
        too_large = isinstance(number, numbers.Real) and number > SIZE_BYTES.maximum
        limit = ", at most 2**53 bytes (8 PiB)" if too_large else ""
        raise config_error(source, key, expected + limit, value,
                           cls=type(exc)) from None
    return size


def parse_duration(value: object, *, source: str | None = None, key: str = "duration") -> float:
    """Parse a duration in ns: a number (ns), or a string such as ``"2us"``, ``"1.5ms"``,
    ``"300ns"``, ``"1e3"`` (units ns, us or \u00b5s, ms, s).

    The result must be finite, non-negative and at most
    :data:`flowsim._validate.DURATION_NS` (1e20 ns).
    """
    expected = "a duration >= 0: a number of ns or a string such as '2us', '1.5ms'"
    number = _with_unit(value, _TIME_PATTERN, _TIME_UNITS, source, key, expected)
    try:
        return as_number(number, source=source, key=key, quantity=DURATION_NS)
    except ConfigError as exc:
        too_large = isinstance(number, numbers.Real) and number > DURATION_NS.maximum
        limit = f" (at most {DURATION_NS.maximum:g} ns)" if too_large else ""
        raise config_error(source, key, expected + limit, value, cls=type(exc)) from None


def _with_unit(value: object, pattern: re.Pattern, units: Mapping[str, float],
               source: str | None, key: str, expected: str) -> float:
    """A number, or a string of a number and a unit of ``units`` scaled to the base unit (a
    number is returned as it is: any ``numbers.Real``, typed ``float`` for the comparisons)."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise config_error(source, key, expected, value, cls=ConfigTypeError)
    if not isinstance(value, str):
        return value  # type: ignore[return-value]  # a Real: compared and checked as a float
    match = pattern.match(value) if len(value) <= 64 else None
    unit = match.group(2).lower() if match else None
    if match is None or unit is None or unit not in units:
        raise config_error(source, key, expected, value)
    return float(match.group(1)) * units[unit]


def format_time(ns: float) -> str:
    """Human form of a duration in ns, e.g. ``'2.326 ms'`` (below a picosecond: ``'0 ns'``,
    the float noise of differences of large times)."""
    if abs(ns) < 1e-3:
        return "0 ns"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"


def format_size(nbytes: float) -> str:
    """Human form of a size in bytes with binary prefixes, e.g. ``'64 MiB'``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.4g} B"
