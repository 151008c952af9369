"""Ring algorithms (ASTRA-sim ``ring``): every step, each rank sends one block to its ring
neighbour and waits for one from the other neighbour.

* reduce-scatter: ``p-1`` steps of ``D/p``, each received block reduced;
* all-gather: ``p-1`` steps of ``D/p`` (ASTRA-sim: "p-1 steps of the per-NPU data");
* all-reduce: reduce-scatter then all-gather, ``2(p-1)`` steps;
* all-to-all: ``p(p-1)/2`` steps of ``D/p``, blocks forwarded hop by hop to their owner;
* broadcast / reduce: a chain from (to) the root through the ring, ``p-1`` steps of ``D``.
"""

from __future__ import annotations

from .base import Algorithm, Step, ranks, register


def ring_steps(collective: str, p: int, direction: int = 1, root: int = 0,
               variant: int = 0) -> list[Step]:
    """Steps of a ring collective on ``p`` ranks sending to ``rank + direction``."""
    src = ranks(p)
    dst = (src + direction) % p
    block = 1.0 / p
    reduce_scatter = [Step(src, dst, block, block) for _ in range(p - 1)]
    gather = [Step(src, dst, block) for _ in range(p - 1)]
    if collective == "reduce_scatter":
        return reduce_scatter
    if collective == "all_gather":
        return gather
    if collective == "all_reduce":
        return reduce_scatter + gather
    if collective == "all_to_all":
        return [Step(src, dst, block) for _ in range(p * (p - 1) // 2)]
    if collective in ("broadcast", "reduce"):
        order = (root + direction * ranks(p)) % p  # chain root -> root+1 -> ...
        steps = [Step(order[i: i + 1], order[i + 1: i + 2], 1.0,
                      1.0 if collective == "reduce" else 0.0) for i in range(p - 1)]
        if collective == "reduce":  # the chain runs towards the root
            steps = [Step(s.dst, s.src, 1.0, 1.0) for s in reversed(steps)]
        return steps
    raise ValueError(f"ring does not implement {collective}")


RING = register(Algorithm(
    name="ring", steps=ring_steps,
    supports=frozenset({"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                        "broadcast", "reduce"})))
