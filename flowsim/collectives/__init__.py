"""Collective algorithms, one module each, behind the contract of :mod:`.base`."""

from __future__ import annotations

from . import direct, double_binary_tree, halving_doubling, ring  # noqa: F401  (registration)
from .base import ALGORITHMS, COLLECTIVES, Algorithm, Step, register

#: Prefix of the flat variants that treat all dimensions as one (``oneRing``, ...).
FLAT_PREFIX = "one"

_NAMES = {name.lower(): name for name in ALGORITHMS}


def canonical_algorithm(name: object) -> str | None:
    """Registered spelling of an algorithm name (``ring``, ``oneRing``, ...), else ``None``.

    Matching is case-insensitive; ASTRA-sim's ``directK`` window suffix is not supported.
    """
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    if key in _NAMES:
        return _NAMES[key]
    if key.startswith(FLAT_PREFIX) and key[len(FLAT_PREFIX):] in _NAMES:
        base = _NAMES[key[len(FLAT_PREFIX):]]
        return FLAT_PREFIX + base[0].upper() + base[1:]
    return None


def base_algorithm(name: str) -> Algorithm:
    """The per-dimension algorithm behind a (possibly flat) name."""
    if name.startswith(FLAT_PREFIX) and name not in ALGORITHMS:
        rest = name[len(FLAT_PREFIX):]
        return ALGORITHMS[rest[0].lower() + rest[1:]]
    return ALGORITHMS[name]


def canonical_collective(name: object) -> str | None:
    """``"all_reduce"`` for ``"all-reduce"``, ``"AllReduce"``, ``"ALL_REDUCE"``...; else None."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace("-", "_")
    aliases = {c.replace("_", ""): c for c in COLLECTIVES} | {"sendrecv": "send_recv",
                                                               "p2p": "send_recv"}
    if key in COLLECTIVES:
        return key
    return aliases.get(key.replace("_", ""))


__all__ = ["ALGORITHMS", "COLLECTIVES", "FLAT_PREFIX", "Algorithm", "Step", "base_algorithm",
           "canonical_algorithm", "canonical_collective", "register"]
