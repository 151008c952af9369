"""Pipeline layouts and schedules: which layers each (virtual) stage holds, and the order in
which a stage runs its forward and backward passes.

Virtual stages (Narayanan et al., SC'21, section 2.2.2): with ``v = vpp`` model chunks per
rank and ``p = pp`` ranks, the model is cut into ``p v`` consecutive virtual stages and rank
``r`` holds virtual stages ``r, r + p, r + 2p, ...`` (chunk ``c`` of rank ``r`` is virtual
stage ``c p + r``). DualPipeV's V (``schedule: dualpipev``, two chunks per rank) instead
gives rank ``r`` virtual stages ``r`` and ``2p - 1 - r``: the first rank holds the first and
the last, the last rank the two in the middle (one after the other, no message between).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType

from ...errors import config_error
from .transformer_checks import micro_batches
from .transformer_spec import TransformerSpec

#: one pass of one chunk on one micro-batch: (``"fwd"`` or ``"bwd"``, chunk, micro-batch)
Unit = tuple[str, int, int]


def layer_counts(spec: TransformerSpec) -> list[int]:
    """Transformer layers of every virtual stage (``pp * vpp`` of them, in model order).

    ``"even"``: the same count everywhere; ``"first_last_fewer"``: the first and the last
    virtual stage one layer fewer than the others (Llama 3's layout, which leaves room for the
    embedding and the output layer; Dubey et al. 2024, section 3.3.2); ``"uniform"``: as
    even as the count allows, the first stages one layer more (DeepSpeed's
    ``partition_uniform``); ``"embedding_weighted"``: the embedding and the output layer
    weigh a layer each and the ``layers + 2`` are split uniformly (torchtitan's
    ``generate_split_points``, DeepSpeed's ``type:transformer|embedding``; Llama 3's layout
    when they divide); or an explicit list of ``pp * vpp`` counts adding up to ``layers``.

    Raises
    ------
    ConfigError
        The layers do not fit the layout; the message suggests one that does.
    """
    n = spec.pp * spec.vpp
    layout = spec.pipeline_layout
    if isinstance(layout, tuple):
        if len(layout) != n or sum(layout) != spec.layers:
            raise config_error(spec.source, "pipeline_layout",
                               f"{n} layer counts (pp * vpp) adding up to layers="
                               f"{spec.layers}", list(layout))
        return list(layout)
    if layout in ("uniform", "embedding_weighted"):
        weighted = layout == "embedding_weighted"
        base, extra = divmod(spec.layers + 2 * weighted, n)
        sizes = [base + (i < extra) for i in range(n)]
        sizes[0] -= weighted
        sizes[-1] -= weighted
        if min(sizes) < 0:
            raise config_error(spec.source, "layers", f"at least {n - 2} with pipeline_layout "
                               f"'{layout}' over pp * vpp = {n} stages", spec.layers)
        return sizes
    if layout == "first_last_fewer":
        if n < 2 or (spec.layers + 2) % n:
            raise config_error(spec.source, "layers",
                               f"with pipeline_layout 'first_last_fewer', layers + 2 a "
                               f"multiple of pp * vpp = {n}", spec.layers)
        k = (spec.layers + 2) // n
        return [k - 1] + [k] * (n - 2) + [k - 1]
    if spec.layers % n:
        hint = " or 'first_last_fewer'" if n >= 2 and (spec.layers + 2) % n == 0 else ""
        raise config_error(spec.source, "layers",
                           f"a multiple of pp * vpp = {n} for an even layout (or give "
                           f"pipeline_layout: a list of {n} layer counts{hint})", spec.layers)
    return [spec.layers // n] * n


def stage_schedule(spec: TransformerSpec, stage: int) -> list[Unit]:
    """The passes of pipeline rank ``stage`` in execution order.

    ``gpipe``: every forward, then every backward, in micro-batch order. ``1f1b``
    (PipeDream-Flush): ``p - stage - 1`` warm-up forwards, then one forward and one backward
    alternately, then the remaining backwards. ``interleaved`` (Narayanan et al. 2021,
    section 2.2.2; Megatron-LM's ``forward_backward_pipelining_with_interleaving``): the
    ``m v`` chunk passes in groups of ``g`` micro-batches per chunk (``microbatch_group``,
    ``p`` by default; Megatron-Core's ``get_schedule_table``: the last group takes what is
    left), ``2 (p - stage - 1) + (v - 1) g`` warm-up forwards, then one forward and one
    backward alternately. ``dualpipev``: :func:`dualpipev`.
    """
    m = micro_batches(spec)
    if spec.schedule == "dualpipev":
        return list(dualpipev(spec, stage)[0])
    if spec.schedule == "gpipe":
        return [("fwd", 0, k) for k in range(m)] + [("bwd", 0, k) for k in range(m)]
    warmup = warmup_forwards(spec, stage)
    if spec.schedule == "1f1b":
        order: list[Unit] = [("fwd", 0, k) for k in range(warmup)]
        for k in range(m - warmup):
            order += [("fwd", 0, warmup + k), ("bwd", 0, k)]
        return order + [("bwd", 0, k) for k in range(m - warmup, m)]
    v, group = spec.vpp, spec.interleave_group
    total = m * v
    table = [(chunk, mb) for first in range(0, m, group)
             for chunk in range(v)
             for mb in range(first, m if first + group >= m else first + group)]

    def unit(k: int, forward: bool) -> Unit:
        chunk, mb = table[k]
        return ("fwd", chunk, mb) if forward else ("bwd", v - chunk - 1, mb)

    order = [unit(k, True) for k in range(warmup)]
    for k in range(total - warmup):
        order += [unit(warmup + k, True), unit(k, False)]
    return order + [unit(k, False) for k in range(total - warmup, total)]


def warmup_forwards(spec: TransformerSpec, stage: int) -> int:
    """Forwards pipeline rank ``stage`` runs before its first backward (1F1B and the
    interleaved schedule; one more with ``moe_a2a_overlap``, as Megatron-Core schedules it
    so that every later forward is independent of the backward it runs beside)."""
    m, p = micro_batches(spec), spec.pp
    if spec.schedule == "1f1b":
        warmup, total = p - stage - 1, m
    else:
        warmup = (p - stage - 1) * 2 + (spec.vpp - 1) * spec.interleave_group
        total = m * spec.vpp
    return min(warmup + spec.moe_a2a_overlap, total)


@lru_cache(maxsize=256)
def dualpipev(spec: TransformerSpec, stage: int
              ) -> tuple[tuple[Unit, ...], frozenset[int], frozenset[int], Mapping[int, int]]:
    """DualPipeV's passes on rank ``r = stage`` of ``p`` for ``m`` micro-batches, and the
    positions of the forwards that run beside the backward after them (DeepSeek-AI's
    ``dualpipe/dualpipev.py``, ``DualPipeV.step``: Sea AI Lab's "cut-in-half" of DualPipe):
    ``2 (p - r - 1)`` forwards of chunk 0; ``r + 1`` times a forward of each chunk; ``p - r
    - 1`` times a backward of chunk 1 and a forward of chunk 1; ``m - 2p + r + 1`` times a
    forward of chunk 0 beside a backward of chunk 1 (on the last rank the first of them one
    after the other), then a forward of chunk 1 beside a backward of chunk 0; ``p - r - 1``
    times a backward of chunk 1, then a forward of chunk 1 beside a backward of chunk 0;
    ``r + 1`` times a backward of each chunk; ``p - r - 1`` backwards of chunk 0. Each chunk
    runs its micro-batches in order.

    Zero bubble (its ``WeightGradStore``): some backwards compute only their input gradients
    and hand their weight gradients to a queue (the third item: their positions), run later
    a chunk at a time, oldest first (the fourth: position -> weight passes run just before
    it; ``len(order)``: at the end): each backward of the third step, its weight pass right
    after it (before the forward); the second half of the sixth step's backwards (which half
    of the middle pair: by the rank's parity); each backward of the seventh step, after a
    weight pass; the rest at the end (step 8)."""
    p, m, r = spec.pp, micro_batches(spec), stage
    order: list[Unit] = []
    paired: set[int] = set()
    deferred: set[int] = set()
    weights: dict[int, int] = {}
    done = {("fwd", 0): 0, ("fwd", 1): 0, ("bwd", 0): 0, ("bwd", 1): 0}

    def run(*passes: tuple[str, int], beside: bool = False, zero_bubble: bool = False,
            weight_first: bool = False) -> None:
        if weight_first:   # a queued weight pass before these
            weights[len(order)] = weights.get(len(order), 0) + 1
        if beside:
            paired.add(len(order))
        if zero_bubble:
            deferred.add(len(order))
        for kind, chunk in passes:
            order.append((kind, chunk, done[kind, chunk]))
            done[kind, chunk] += 1

    for _ in range(2 * (p - r - 1)):
        run(("fwd", 0))
    for _ in range(r + 1):
        run(("fwd", 0), ("fwd", 1))
    for _ in range(p - r - 1):
        run(("bwd", 1), zero_bubble=True)
        run(("fwd", 1), weight_first=True)
    for i in range(m - 2 * p + r + 1):
        run(("fwd", 0), ("bwd", 1), beside=not (i == 0 and r == p - 1))
        run(("fwd", 1), ("bwd", 0), beside=True)
    for _ in range(p - r - 1):
        run(("bwd", 1))
        run(("fwd", 1), ("bwd", 0), beside=True)
    half = (r + 1) // 2
    for i in range(r + 1):
        run(("bwd", 1), zero_bubble=i > half or (i == half and r % 2 == 1))
        run(("bwd", 0), zero_bubble=i >= half)
    for _ in range(p - r - 1):
        run(("bwd", 0), zero_bubble=True, weight_first=True)
    weights[len(order)] = r + 1
    return tuple(order), frozenset(paired), frozenset(deferred), MappingProxyType(weights)


def virtual_stage(spec: TransformerSpec, stage: int, chunk: int) -> int:
    """The virtual stage chunk ``chunk`` of rank ``stage`` holds."""
    if spec.schedule == "dualpipev":
        return stage if chunk == 0 else 2 * spec.pp - 1 - stage
    return chunk * spec.pp + stage


def holder(spec: TransformerSpec, vs: int) -> tuple[int, int]:
    """``(rank, chunk)`` holding virtual stage ``vs``."""
    if spec.schedule == "dualpipev":
        return (vs, 0) if vs < spec.pp else (2 * spec.pp - 1 - vs, 1)
    return vs % spec.pp, vs // spec.pp


def neighbours(spec: TransformerSpec, stage: int, chunk: int
               ) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """``(rank, chunk)`` of the previous and the next virtual stage (``None`` at the ends)."""
    vs = virtual_stage(spec, stage, chunk)
    last = spec.pp * spec.vpp - 1
    before = None if vs == 0 else holder(spec, vs - 1)
    after = None if vs == last else holder(spec, vs + 1)
    return before, after


def pass_tag(spec: TransformerSpec, chunk: int, m: int) -> str:
    """A pass's name, the start of its ops' names: its micro-batch, and its model chunk
    when a rank runs several."""
    return f"mb{m}" + (f".chunk{chunk}" if spec.vpp > 1 else "")
