"""The ops of one pipeline stage of a transformer iteration (formulas in
:mod:`.transformer`): compute blocks, Megatron's tensor-parallel collectives, pipeline
sends and receives, data-parallel gradient collectives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import config_error
from ..graph import Op
from .transformer_spec import HEAD_DIM, SCHEDULES, TransformerSpec


def pipeline_schedule(schedule: str, stages: int, stage: int,
                      micro_batches: int) -> list[tuple[str, int]]:
    """Order of the forward (``"fwd"``) and backward (``"bwd"``) passes of one stage.

    ``"1f1b"``: ``min(stages - stage - 1, micro_batches)`` warm-up forwards, then a forward
    and a backward alternately, then the remaining backwards. ``"gpipe"``: every forward,
    then every backward, both in micro-batch order.

    Returns
    -------
    list of (str, int)
        ``(pass, micro_batch)`` in execution order.
    """
    if schedule not in SCHEDULES:
        raise config_error("argument", "schedule", "one of " + ", ".join(SCHEDULES), schedule)
    if schedule == "gpipe":
        return [("fwd", m) for m in range(micro_batches)] + \
               [("bwd", m) for m in range(micro_batches)]
    warmup = min(stages - stage - 1, micro_batches)
    order = [("fwd", m) for m in range(warmup)]
    for m in range(micro_batches - warmup):
        order += [("fwd", warmup + m), ("bwd", m)]
    return order + [("bwd", m) for m in range(micro_batches - warmup, micro_batches)]


@dataclass(frozen=True)
class _Block:
    """Per-micro-batch, per-NPU quantities of one block (attention, MLP or logits)."""

    name: str
    flops: float         # forward FLOPs (= ig = wg)
    mem_bytes: float     # weights + stored activations, touched by every pass
    has_g: bool          # ends with Megatron's g operator (all-reduce forward)


def _blocks(spec: TransformerSpec) -> dict[str, _Block]:
    b, s, h, t, d = spec.micro_batch, spec.sequence, spec.hidden, spec.tp, spec.dtype_bytes
    f = spec.ffn if spec.ffn is not None else 4 * h
    a = spec.heads if spec.heads is not None else h / HEAD_DIM
    r = 1 / t if spec.sp else 1.0       # replicated activations are sharded by sp
    scale = d / 2                       # Korthikanti et al. count bytes at 16 bits
    blocks = {
        "attn": _Block("attn", (8 * b * s * h * h + 4 * b * s * s * h) / t,
                       4 * h * h * d / t + scale * (5 * b * s * h * r
                                                    + (8 * b * s * h + 5 * a * s * s * b) / t),
                       True),
        "mlp": _Block("mlp", 4 * b * s * h * f / t,
                      2 * h * f * d / t + scale * (5 * b * s * h * r + 4 * b * s * f / t),
                      True),
    }
    if spec.vocab is not None:
        v = spec.vocab
        blocks["logits"] = _Block("logits", 2 * b * s * h * v / t,
                                  h * v * d / t + d * (b * s * h * r + b * s * v / t), False)
    return blocks


def layer_parameter_bytes(spec: TransformerSpec) -> int:
    """Gradient bytes of one transformer layer on one NPU: ``(4h² + 2hf) d / t``."""
    h = spec.hidden
    f = spec.ffn if spec.ffn is not None else 4 * h
    return (4 * h * h + 2 * h * f) * spec.dtype_bytes // spec.tp


class _StageGraph:
    """Ops of one stage in schedule order: compute ops chained by control dependencies."""

    def __init__(self, spec: TransformerSpec, tp_dims: tuple[int, ...],
                 dp_dims: tuple[int, ...]) -> None:
        self.spec = spec
        self.ops: list[Op] = []
        self.last_compute: int | None = None
        self.tp_dims = tp_dims
        self.dp_dims = dp_dims
        self.act = spec.micro_batch * spec.sequence * spec.hidden * spec.dtype_bytes

    def _add(self, **fields: Any) -> int:
        op_id = len(self.ops)
        self.ops.append(Op(id=op_id, **fields))
        return op_id

    def compute(self, name: str, block: _Block, layer: int, pass_: str,
                needs: int | None) -> int:
        """A compute op after the previous one; ``needs`` (a collective or recv) is a data
        dependency unless it is that previous compute op."""
        deps = () if needs is None or needs == self.last_compute else (needs,)
        ctrl = () if self.last_compute is None else (self.last_compute,)
        self.last_compute = self._add(
            kind="compute", name=name, flops=block.flops, mem_bytes=block.mem_bytes,
            duration_ns=self.spec.roofline.time_ns(block.flops, block.mem_bytes),
            deps=deps, ctrl_deps=ctrl, layer=layer, pass_=pass_)
        return self.last_compute

    def collective(self, name: str, collective: str, size: int, dims: tuple[int, ...],
                   layer: int, pass_: str, needs: int | None) -> int:
        return self._add(kind="collective", name=name, collective=collective, size=int(size),
                         dims=dims, deps=() if needs is None else (needs,), layer=layer,
                         pass_=pass_)

    def p2p(self, kind: str, name: str, offset: int, tag: int, layer: int, pass_: str,
            needs: int | None = None) -> int:
        size = self.act // self.spec.tp if self.spec.sp else self.act
        return self._add(kind=kind, name=name, size=int(size), peer_offset=offset, tag=tag,
                         deps=() if needs is None else (needs,), layer=layer, pass_=pass_)

    # -------------------------------------------------------------- one block, one pass
    def forward(self, block: _Block, layer: int, m: int, x: int | None) -> int:
        """Forward of a block on micro-batch ``m`` whose input comes from op ``x``; returns
        the op its output comes from."""
        name = f"{_block_name(block, layer, m)}.fwd"
        tp = self.spec.tp > 1
        if tp and self.spec.sp:     # f: all-gather of the sequence-sharded input
            x = self.collective(f"{name}.all_gather", "all_gather", self.act // self.spec.tp,
                                self.tp_dims, layer, "fwd", x)
        x = self.compute(name, block, layer, "fwd", x)
        if tp and block.has_g:      # g: all-reduce (reduce-scatter with sp) of the output
            kind = "reduce_scatter" if self.spec.sp else "all_reduce"
            x = self.collective(f"{name}.{kind}", kind, self.act, self.tp_dims, layer, "fwd", x)
        return x

    def backward(self, block: _Block, layer: int, m: int, g: int | None) -> tuple[int, int]:
        """Input- and weight-gradient of a block; returns (op the input gradient comes from,
        the weight-gradient op)."""
        name = _block_name(block, layer, m)
        tp = self.spec.tp > 1
        if tp and self.spec.sp and block.has_g:     # g backward: all-gather
            g = self.collective(f"{name}.ig.all_gather", "all_gather",
                                self.act // self.spec.tp, self.tp_dims, layer, "ig", g)
        g = ig = self.compute(f"{name}.ig", block, layer, "ig", g)
        if tp:                                      # f backward: all-reduce / reduce-scatter
            kind = "reduce_scatter" if self.spec.sp else "all_reduce"
            g = self.collective(f"{name}.ig.{kind}", kind, self.act, self.tp_dims, layer,
                                "ig", ig)
        wg = self.compute(f"{name}.wg", block, layer, "wg", None)
        return g, wg

    def gradient_sync(self, layer: int, size: int, after: int) -> None:
        """Data-parallel gradient collectives of a layer after its last weight gradient."""
        if self.spec.dp == 1:
            return
        name = _layer_name(self.spec, layer)
        if not self.spec.zero:
            self.collective(f"{name}.grad.all_reduce", "all_reduce", size, self.dp_dims,
                            layer, "wg", after)
            return
        rs = self.collective(f"{name}.grad.reduce_scatter", "reduce_scatter", size,
                             self.dp_dims, layer, "wg", after)
        self.collective(f"{name}.param.all_gather", "all_gather", -(-size // self.spec.dp),
                        self.dp_dims, layer, "wg", rs)


def _block_name(block: _Block, layer: int, m: int) -> str:
    return f"mb{m}.logits" if block.name == "logits" else f"mb{m}.layer{layer}.{block.name}"


def _layer_name(spec: TransformerSpec, layer: int) -> str:
    return "logits" if layer == spec.layers else f"layer{layer}"


def _stage_ops(spec: TransformerSpec, stage: int, offsets: list[int],
               dims: dict[str, tuple[int, ...]]) -> list[Op]:
    g = _StageGraph(spec, dims["tp"], dims["dp"])
    blocks = _blocks(spec)
    per_stage = spec.layers // spec.pp
    own = range(stage * per_stage, (stage + 1) * per_stage)
    last = stage == spec.pp - 1
    logits = "logits" in blocks and last
    top = spec.layers if logits else own[-1]          # the stage's last layer index
    layer_bytes = layer_parameter_bytes(spec)
    logits_bytes = (-(-spec.vocab // spec.tp) * spec.hidden * spec.dtype_bytes
                    if logits and spec.vocab is not None else 0)   # logits: a vocab is set
    order = pipeline_schedule(spec.schedule, spec.pp, stage, spec.micro_batches)
    final = max(i for i, (kind, _) in enumerate(order) if kind == "bwd")
    for i, (kind, m) in enumerate(order):
        if kind == "fwd":
            x = None
            if stage > 0:
                x = g.p2p("recv", f"mb{m}.recv_activation", -offsets[stage - 1], 2 * m,
                          own[0], "fwd")
            for layer in own:
                x = g.forward(blocks["attn"], layer, m, x)
                x = g.forward(blocks["mlp"], layer, m, x)
            if logits:
                x = g.forward(blocks["logits"], spec.layers, m, x)
            if not last:
                g.p2p("send", f"mb{m}.send_activation", offsets[stage], 2 * m, top, "fwd", x)
            continue
        x = None
        if not last:
            x = g.p2p("recv", f"mb{m}.recv_gradient", offsets[stage], 2 * m + 1, top, "ig")
        if logits:
            x, wg = g.backward(blocks["logits"], spec.layers, m, x)
            if i == final:
                g.gradient_sync(spec.layers, logits_bytes, wg)
        for layer in reversed(own):
            x, _ = g.backward(blocks["mlp"], layer, m, x)
            x, wg = g.backward(blocks["attn"], layer, m, x)
            if i == final:
                g.gradient_sync(layer, layer_bytes, wg)
        if stage > 0:
            g.p2p("send", f"mb{m}.send_gradient", -offsets[stage - 1], 2 * m + 1, own[0],
                  "ig", x)
    return g.ops


