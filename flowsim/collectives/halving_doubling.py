"""Halving-doubling (ASTRA-sim ``halvingDoubling``; recursive halving / doubling).

On ``p = 2^k`` ranks:

* reduce-scatter: step ``i = 1..k`` exchanges ``D/2^i`` with the partner at distance
  ``2^(i-1)`` (rank XOR ``2^(i-1)``). ASTRA-sim charges the local reduction one halving
  behind the message: ``D/2^(i+1)`` after step ``i < k`` and none after step ``k``;
* all-gather: step ``i = 0..k-1`` exchanges ``2^i D/p`` with the partner at distance
  ``p/2^(i+1)``;
* all-reduce: reduce-scatter then all-gather;
* broadcast / reduce: a binomial tree, ``k`` steps of ``D``.

Not defined for all-to-all (as in ASTRA-sim), nor for ``p`` that is not a power of two:
both are refused with a clear error rather than approximated.
"""

from __future__ import annotations

from .base import Algorithm, Step, ranks, register


def _check_power_of_two(p: int) -> None:
    if p < 2 or p & (p - 1):
        raise ValueError(f"halvingDoubling needs a power-of-two group size, got {p} NPUs "
                         f"(use ring or direct on this dimension)")


def halving_doubling_steps(collective: str, p: int, direction: int = 1,
                           root: int = 0, variant: int = 0) -> list[Step]:
    """Steps of a halving-doubling collective on ``p = 2^k`` ranks."""
    _check_power_of_two(p)
    k = p.bit_length() - 1
    r = ranks(p)
    rs = []
    for i in range(1, k + 1):
        reduce = 1.0 / 2 ** (i + 1) if i < k else 0.0
        rs.append(Step(r, r ^ (1 << (i - 1)), 1.0 / 2**i, reduce))
    ag = [Step(r, r ^ (p >> (i + 1)), 2**i / p) for i in range(k)]
    if collective == "reduce_scatter":
        return rs
    if collective == "all_gather":
        return ag
    if collective == "all_reduce":
        return rs + ag
    if collective in ("broadcast", "reduce"):
        rel = (r - root) % p
        steps = []
        for i in range(k):  # binomial tree: ranks < 2^i already hold the data
            senders = rel[rel < (1 << i)]
            src = (senders + root) % p
            dst = (senders + (1 << i) + root) % p
            steps.append(Step(src, dst, 1.0))
        if collective == "reduce":
            steps = [Step(s.dst, s.src, 1.0, 1.0) for s in reversed(steps)]
        return steps
    raise ValueError(f"halvingDoubling does not implement {collective}")


HALVING_DOUBLING = register(Algorithm(
    name="halvingDoubling", steps=halving_doubling_steps,
    supports=frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"}),
    check_size=_check_power_of_two))
