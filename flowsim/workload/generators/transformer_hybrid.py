"""Hybrid models (Mamba-2 mixers among the transformer's blocks): the layer pattern and the
mixers' widths, read and checked.

Megatron-Core's ``MambaModel`` (``megatron/core/ssm/mamba_block.py``) builds its layers from
a pattern, one character per layer (``--hybrid-override-pattern``): ``M`` a Mamba-2 mixer,
``*`` self-attention, ``-`` a dense MLP, ``E`` a mixture of experts. Each is a layer of its
own, with its own pre-norm and residual add, so ``layers`` is the pattern's length (its
``|`` marks, between the layers of consecutive pipeline stages, not counted) and a pipeline
splits the pattern's characters. NVIDIA's Nemotron-H and Nemotron 3 models are built so
(e.g. ``M-M-M-M*-...``). The mixer is :mod:`.transformer_mamba`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..._validate import check_unknown_keys, read_int
from ...errors import config_error, requirement

#: the pattern's characters: a Mamba-2 mixer, attention, a dense MLP, a mixture of experts
MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
SYMBOLS = MAMBA + ATTENTION + MLP + MOE
#: longest pattern (characters)
MAX_PATTERN = 1 << 16


@dataclass(frozen=True)
class MambaMixer:
    """A Mamba-2 mixer's widths (Megatron-Core's ``mamba_*`` settings; defaults its
    ``TransformerConfig``'s): ``heads`` SSM heads of ``head_dim`` channels (0: ``2 hidden /
    head_dim``, the expansion of two), ``state`` the state size, ``groups`` the groups
    sharing B and C, ``conv`` the causal convolution's width, ``chunk`` the SSD kernels'
    chunk of tokens."""

    heads: int = 0
    head_dim: int = 64
    state: int = 128
    groups: int = 8
    conv: int = 4
    chunk: int = 128

    def inner(self, hidden: int) -> int:
        """The mixer's inner width (``heads x head_dim``)."""
        return (self.heads or 2 * hidden // self.head_dim) * self.head_dim

    def nheads(self, hidden: int) -> int:
        return self.inner(hidden) // self.head_dim


#: Megatron-Core's mark between pipeline stages' layers in a pattern, and the one before
#: each multi-token prediction depth's layers
PIPE, DEPTH = "|", "/"
#: the depth patterns flowsim models: one attention layer and its MLP (Nemotron 3 Super's)
DEPTH_PATTERNS = (ATTENTION + MOE, ATTENTION + MLP)


def read_pattern(values: Mapping[str, Any], source: str) -> str:
    """``hybrid_pattern``: one of ``M*-E`` per layer, with ``|`` between the layers of
    consecutive (virtual) pipeline stages if the run places them so ("" when absent)."""
    raw = values.get("hybrid_pattern")
    if raw is None or raw == "":
        return ""
    what = f"a string of {', '.join(SYMBOLS)} per layer (Megatron-Core's " \
           f"hybrid_override_pattern), '|' between pipeline stages, e.g. 'M-M*-|ME'"
    if not isinstance(raw, str) or len(raw) > MAX_PATTERN:
        raise config_error(source, "hybrid_pattern", what, raw)
    pattern = raw.strip()
    if not pattern:
        raise config_error(source, "hybrid_pattern", what, raw)
    bad = sorted(set(pattern) - set(SYMBOLS + PIPE + DEPTH))
    if bad:
        raise config_error(source, "hybrid_pattern", what + f"; {bad[0]!r} is none of them",
                           raw)
    main, *depths = pattern.split(DEPTH)
    if depths and (len(set(depths)) != 1 or depths[0] not in DEPTH_PATTERNS):
        raise config_error(source, "hybrid_pattern", what + "; after each '/', one "
                           "multi-token prediction depth's layers, the same for every depth: "
                           + " or ".join(DEPTH_PATTERNS) + " (flowsim models no other)", raw)
    if PIPE in main and not all(main.split(PIPE)):
        raise config_error(source, "hybrid_pattern", what + "; every stage a layer or more",
                           raw)
    return pattern


def split_depths(pattern: str) -> tuple[str, str, int]:
    """A pattern read by :func:`read_pattern` as (the decoder's layers, one multi-token
    prediction depth's, the depths)."""
    main, *depths = pattern.split(DEPTH)
    return main, (depths[0] if depths else ""), len(depths)


def stage_layers(pattern: str, pp: int, vpp: int, layout: Any, source: str
                 ) -> tuple[int, ...] | None:
    """The layers of each (virtual) stage a pattern's ``|`` marks give (Megatron-Core's
    ``select_pipeline_segment``: segment ``v pp + r`` on rank ``r``'s virtual stage ``v``,
    in model order), or None without marks."""
    if PIPE not in pattern:
        return None
    segments = pattern.split(PIPE)
    if layout != "even":
        raise config_error(source, "pipeline_layout", "unset where hybrid_pattern marks "
                           "the stages with '|'", layout)
    if len(segments) != pp * vpp:
        raise config_error(source, "hybrid_pattern", f"{pp * vpp} stages (pp * vpp) between "
                           f"its '|' marks", f"{len(segments)} stages")
    return tuple(len(s) for s in segments)


def read_mamba(values: Mapping[str, Any], source: str) -> MambaMixer | None:
    """``mamba``: a mapping of :class:`MambaMixer`'s widths (absent: its defaults where the
    pattern has an ``M``, else None)."""
    raw = values.get("mamba")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise config_error(source, "mamba", "a mapping of " + ", ".join(
            f.name for f in fields(MambaMixer)), raw)
    check_unknown_keys(raw, [f.name for f in fields(MambaMixer)], source=source,
                       prefix="mamba.")
    defaults = MambaMixer()
    return MambaMixer(**{f.name: read_int(
        raw, f.name, source=source, prefix="mamba.", default=getattr(defaults, f.name),
        minimum=0 if f.name == "heads" else 1, maximum=1 << 20)
        for f in fields(MambaMixer)})


def hybrid_keys(pattern: Any, widths: Mapping[str, Any]) -> dict[str, Any]:
    """The keys an importer's hybrid settings give: the pattern, and the Mamba-2 widths it
    states (``widths``: :class:`MambaMixer`'s names, None where unset); none without a
    pattern."""
    if pattern is None or pattern == "":
        return {}
    mamba = {key: value for key, value in widths.items() if value is not None}
    return {"hybrid_pattern": pattern, **({"mamba": mamba} if mamba else {})}


def check_hybrid(spec: Any) -> None:
    """The pattern against the other keys (once defaults are filled), and flowsim's limits:
    what its hybrid model leaves out is refused, not priced as something else."""
    src, pattern = spec.source, spec.hybrid_pattern

    need = requirement(src)

    need(MAMBA in pattern or spec.mamba is None, "mamba", "unset without M layers in "
         "hybrid_pattern (the mixers it shapes)", spec.mamba)
    if not pattern:
        return
    need(spec.layers == len(pattern), "layers", f"{len(pattern)}, the length of "
         f"hybrid_pattern (one layer per character)", spec.layers)
    need((MOE in pattern + spec.hybrid_mtp) == (spec.experts > 0), "experts",
         "more than 0 where hybrid_pattern (its depths too) has an E (a mixture of experts), "
         "else 0", spec.experts)
    why = " with hybrid_pattern (flowsim does not model them together)"
    for key, ok, expected in (
            ("cp", spec.cp == 1 or MAMBA not in pattern, "1"),
            ("mtp_layers", not spec.mtp_layers or spec.hybrid_mtp, "0 without depths in "
             "the pattern ('/*E' per depth, as Megatron-Core's hybrid models name them), or"
             " as many as it names"),
            ("lora_rank", not spec.lora_rank, "0"),
            ("mla", spec.mla is None, "unset"),
            ("recompute", spec.recompute != "every_other_matmul", "none, selective or full"),
            ("tp_comm_overlap", not spec.tp_comm_overlap or spec.tp == 1, "false"),
            # combined 1F1B: Megatron-Core's build_schedule_plan is GPTModel's alone
            ("moe_a2a_overlap", not spec.moe_a2a_overlap, "false")):
        need(ok, key, expected + why, getattr(spec, key))
    if MAMBA in pattern:
        m = spec.mamba
        need(bool(m.heads) or 2 * spec.hidden % m.head_dim == 0, "mamba.head_dim",
             f"a divisor of 2 hidden = {2 * spec.hidden} (the heads' default: 2 hidden / "
             f"head_dim), or mamba.heads given", m.head_dim)
        inner = m.inner(spec.hidden)
        width = 2 * inner + 2 * m.groups * m.state + m.nheads(spec.hidden)
        need(spec.dtype != "fp8" or width % 16 == 0, "mamba.heads", f"heads making in_proj's "
             f"width (2 heads head_dim + 2 groups state + heads = {width}) a multiple of 16 "
             f"in FP8 (Megatron-Core's rule)", m.nheads(spec.hidden))
        need(inner % spec.tp == 0 and m.nheads(spec.hidden) % spec.tp == 0, "mamba.heads",
             f"a multiple of tp={spec.tp}", m.nheads(spec.hidden))
        need(m.groups % spec.tp == 0 and m.nheads(spec.hidden) % m.groups == 0,
             "mamba.groups", f"a multiple of tp={spec.tp} dividing the "
             f"{m.nheads(spec.hidden)} heads", m.groups)
