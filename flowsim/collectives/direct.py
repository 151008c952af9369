"""Direct algorithms (ASTRA-sim ``direct``): every rank sends to every peer at once.

* reduce-scatter / all-to-all: one round, block ``j`` of ``D/p`` to each peer ``j``
  (reduce-scatter reduces the ``p-1`` received blocks, charged once as ``D/p``);
* all-gather: one round, the rank's own block ``D/p`` to every peer;
* all-reduce: a reduce-scatter round then an all-gather round;
* broadcast: the root sends ``D`` to every peer; reduce: every peer sends ``D`` to the root.
"""

from __future__ import annotations

import numpy as np

from .base import Algorithm, Step, register


def _all_pairs(p: int) -> tuple[np.ndarray, np.ndarray]:
    src = np.repeat(np.arange(p), p - 1)
    k = np.tile(np.arange(1, p), p)
    return src, (src + k) % p


def direct_steps(collective: str, p: int, direction: int = 1, root: int = 0,
                 variant: int = 0) -> list[Step]:
    """Steps of a direct collective on ``p`` ranks."""
    src, dst = _all_pairs(p)
    block = 1.0 / p
    if collective == "reduce_scatter":
        return [Step(src, dst, block, block)]
    if collective in ("all_gather", "all_to_all"):
        return [Step(src, dst, block)]
    if collective == "all_reduce":
        return [Step(src, dst, block, block), Step(src, dst, block)]
    peers = np.array([r for r in range(p) if r != root], dtype=np.int64)
    roots = np.full(p - 1, root, dtype=np.int64)
    if collective == "broadcast":
        return [Step(roots, peers, 1.0)]
    if collective == "reduce":
        return [Step(peers, roots, 1.0, 1.0)]
    raise ValueError(f"direct does not implement {collective}")


DIRECT = register(Algorithm(
    name="direct", steps=direct_steps,
    supports=frozenset({"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                        "broadcast", "reduce"})))
