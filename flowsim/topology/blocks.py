"""Building blocks of a multi-dimensional topology: Ring, FullyConnected, Switch.

Each block describes one *instance* of a dimension: ``p`` NPUs with local coordinates
``0..p-1`` (and, for ``Switch``, one switch node with local index ``p``). A block knows

* its directed links as local ``(src, dst)`` pairs (``local_links``), and
* its routing, vectorized: how many hops a message from local ``a`` to local ``b`` takes
  (``hops``) and which local link is its ``k``-th hop (``hop_link``).

Conventions follow ASTRA-sim's analytical backend: a Ring is bidirectional and routes the shorter
way, ties clockwise (increasing id); FullyConnected goes direct; Switch goes up and down.
Adding a block means one class here plus its entry in :data:`BLOCKS`.
"""

from __future__ import annotations

import numpy as np


class Ring:
    """Bidirectional ring: link ``i -> i+1`` (clockwise, local id ``i``) and ``i -> i-1``
    (anticlockwise, local id ``p + i``). A 2-NPU ring has just the two links ``0->1``, ``1->0``."""

    name = "Ring"
    has_switch = False

    @staticmethod
    def num_links(p: int) -> int:
        return p if p == 2 else 2 * p

    @staticmethod
    def local_links(p: int) -> tuple[np.ndarray, np.ndarray]:
        i = np.arange(p)
        if p == 2:
            return i, (i + 1) % p
        return np.concatenate([i, i]), np.concatenate([(i + 1) % p, (i - 1) % p])

    @staticmethod
    def hops(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
        d = (b - a) % p
        return np.minimum(d, p - d)


    @staticmethod
    def hop_link(a: np.ndarray, b: np.ndarray, k: np.ndarray, p: int) -> np.ndarray:
        d = (b - a) % p
        clockwise = 2 * d <= p  # ties go clockwise, as in ASTRA-sim
        if p == 2:
            return (a + k) % p
        return np.where(clockwise, (a + k) % p, p + (a - k) % p)


class FullyConnected:
    """A direct link between every ordered pair: ``i -> j`` has local id ``i*(p-1) + j'``
    with ``j' = j`` for ``j < i`` and ``j - 1`` otherwise."""

    name = "FullyConnected"
    has_switch = False

    @staticmethod
    def num_links(p: int) -> int:
        return p * (p - 1)

    @staticmethod
    def local_links(p: int) -> tuple[np.ndarray, np.ndarray]:
        src = np.repeat(np.arange(p), p - 1)
        j = np.tile(np.arange(p - 1), p)
        dst = np.where(j < src, j, j + 1)
        return src, dst

    @staticmethod
    def hops(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
        return (a != b).astype(np.int64)


    @staticmethod
    def hop_link(a: np.ndarray, b: np.ndarray, k: np.ndarray, p: int) -> np.ndarray:
        return a * (p - 1) + np.where(b < a, b, b - 1)


class Switch:
    """A switch node (local index ``p``) with an uplink ``i -> switch`` (local id ``i``) and a
    downlink ``switch -> i`` (local id ``p + i``) per NPU. Messages go up and down: 2 hops."""

    name = "Switch"
    has_switch = True

    @staticmethod
    def num_links(p: int) -> int:
        return 2 * p

    @staticmethod
    def local_links(p: int) -> tuple[np.ndarray, np.ndarray]:
        i = np.arange(p)
        sw = np.full(p, p)
        return np.concatenate([i, sw]), np.concatenate([sw, i])

    @staticmethod
    def hops(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
        return 2 * (a != b).astype(np.int64)


    @staticmethod
    def hop_link(a: np.ndarray, b: np.ndarray, k: np.ndarray, p: int) -> np.ndarray:
        return np.where(k == 0, a, p + b)


BLOCKS = {cls.name: cls for cls in (Ring, FullyConnected, Switch)}
_ALIASES = {name.lower(): name for name in BLOCKS} | {"fc": "FullyConnected",
                                                       "fully_connected": "FullyConnected"}


def canonical_block_name(name: object) -> str | None:
    """The registered block name for a user-written name (case-insensitive), else ``None``."""
    if not isinstance(name, str):
        return None
    return _ALIASES.get(name.strip().lower())
