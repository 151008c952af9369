"""Multi-token prediction (``mtp_layers``): DeepSeek-V3's MTP modules as Megatron-Core runs
them (``--mtp-num-layers``; ``megatron/core/transformer/multi_token_prediction.py``).

Depth ``j`` predicts the token ``j + 2`` places ahead. On the last pipeline stage, after the
decoder's final norm, it embeds the input tokens shifted by ``j + 1`` (the vocabulary-parallel
embedding and its tensor-parallel reduction, as on the first stage), norms that embedding and
the hidden state it is given (the decoder's output, or the previous depth's), concatenates
them and projects ``2 h`` back to ``h`` (a column-parallel linear layer: its input gathered
with sequence parallelism, its output all-gathered over the TP ranks, then split over them
again by sequence, which costs nothing forward and an all-gather backward), runs one transformer
layer of the decoder's last layer's kind, norms its output and computes logits and a cross
entropy with the shared output layer. Its output is the next depth's hidden state. The
backward runs the depths last first, each one's hidden-state gradient joining the one before
(the decoder's output for the first); under full recomputation a depth's projection and
layer run again before its backward, as Megatron-Core checkpoints them, but for its block
method, which skips them (:meth:`~.transformer_spec.TransformerSpec.is_recomputed`).

A depth is a row of the per-layer breakdown (``mtp<j>``, after the decoder's layers: its
index is ``layers + j``) and a unit of parameters (its layer, projection and norms; the first
depth's also its copy of an untied embedding held on another rank); its logits count in the
``logits`` row. Megatron-Core's default places every depth on the last stage, outside the
pipeline's split of the layers (``--pipeline-model-parallel-layout`` can move them: not
modelled).
"""

from __future__ import annotations

from functools import partial

from .transformer_buckets import ParameterGathers
from .transformer_fsdp import FullySharded
from .transformer_kernels import LayerKernels
from .transformer_passes import Frontier, PassBuilder


class MultiTokenPrediction:
    """Builds the depths' ops on the stage that runs the last virtual stage.

    Parameters
    ----------
    b, k
        The stage's op builder and layer kernels.
    gathers, fsdp
        The stage's parameter all-gathers (distributed optimizer) and fully sharded units.
    logits_row
        The per-layer breakdown's row of the output layer.
    """

    def __init__(self, b: PassBuilder, k: LayerKernels, gathers: ParameterGathers,
                 fsdp: FullySharded, logits_row: int) -> None:
        self.b, self.k, self.gathers, self.fsdp = b, k, gathers, fsdp
        self.spec = k.spec
        self.logits_row = logits_row

    def _embedding_unit(self) -> str | None:
        """The fully sharded unit of the embedding the depths look tokens up in: the
        embedding's on a rank that holds it, the output layer's when tied (one weight), else
        none (the first depth's own copy, in its unit)."""
        s = self.spec
        if s.ends_on_one_rank:
            return "embedding"
        return self.fsdp.logits_unit() if s.tied_embeddings else None

    def _body(self, name: str, layer: int, x: Frontier) -> Frontier:
        """Norms, concatenation, projection (and its output gathered over TP), the layer."""
        b, s = self.b, self.spec
        k = self.k.of_layer(layer)   # the depth's, in its precision
        x = (b.compute(f"{name}.inputs", k.mtp_inputs, layer, "fwd", x),)
        x = b.tp_block(f"{name}.projection", k.mtp_projection, layer, "fwd", x, gather=True,
                       reduce=False, gathered=2 * k.gather_bytes)
        if s.tp > 1:
            x = (b.collective(f"{name}.projection.output.all_gather", "all_gather",
                              k.shard_bytes, b.groups.tp, layer, "fwd", x),)
        return b.forward(layer, name, x)

    def forward(self, tag: str, hidden: Frontier) -> None:
        """Every depth's forward, from the decoder's normed output ``hidden``."""
        b, k = self.b, self.k
        for j, layer in enumerate(self.spec.mtp_depths):
            name = f"{tag}.mtp{j}"
            x = self.gathers.reach(layer, ())
            x = self.fsdp.unshard(self.fsdp.unit(layer), name, layer, "fwd", x)
            unit = self._embedding_unit()
            if unit is not None:
                x = self.fsdp.unshard(unit, f"{name}.embedding", layer, "fwd", x)
            x = b.tp_block(f"{name}.embedding", k.embedding, layer, "fwd", x, gather=False,
                           reduce=True)
            if unit == "embedding":
                self.fsdp.after_forward(unit)
            x = self._body(name, layer, (*hidden, *x))
            hidden = (b.compute(f"{name}.final_norm", b.residual + k.norm, layer, "fwd", x),)
            b.tp_block(f"{name}.logits", k.logits, self.logits_row, "fwd", hidden,
                       gather=True, reduce=False)
            self.fsdp.after_forward(self.fsdp.unit(layer))

    def backward(self, tag: str, g: Frontier, final: bool,
                 ready: list[tuple[tuple[float, float], Frontier]]) -> Frontier:
        """Every depth's backward, the last first; appends each depth's parameters and the
        frontier after its weight gradients to ``ready`` (the stage's gradient buckets).
        Returns the gradient of the decoder's output."""
        b, k, s = self.b, self.k, self.spec
        row = self.logits_row
        hidden: Frontier = ()
        for j, layer in reversed(list(enumerate(s.mtp_depths))):
            name = f"{tag}.mtp{j}"
            x = b.output_backward(f"{name}.logits", row, g)
            x = self.fsdp.unshard(self.fsdp.unit(layer), name, layer, "ig", (*x, *hidden))
            if s.is_recomputed(layer, 0):
                x = (*x, *self._body(f"{name}.recompute", layer, ()))
            x = b.backward(layer, name, x, k.norm_backward)
            if s.tp > 1 and s.sp:   # the sequence split's backward: an all-gather
                x = (b.collective(f"{name}.projection.output.split.all_gather", "all_gather",
                                  k.shard_bytes, b.groups.tp, layer, "ig", x),)
            # the projection: its output's gather is a split backward; its input's gradient
            # reduced over TP, its input gathered again for the weight gradient (sp)
            d = k.of_layer(layer)   # the depth's, in its precision
            regather = b.regather(f"{name}.projection.dgrad", layer, x, 2 * d.gather_bytes)
            x = b.tp_block(f"{name}.projection.dgrad", b.norm_backward + d.mtp_projection_dgrad,
                           layer, "ig", x, gather=False, reduce=True, after=regather,
                           reduced=2 * k.activation_bytes)
            b.compute(f"{name}.projection.wgrad", d.mtp_projection_wgrad, layer, "wg", regather)
            hidden = (b.compute(f"{name}.inputs_backward", k.mtp_inputs_backward, layer, "ig",
                                x),)
            e: Frontier = hidden
            unit = self._embedding_unit()
            if unit is not None:
                e = self.fsdp.unshard(unit, f"{name}.embedding", layer, "ig", e)
            b.embedding_backward(f"{name}.embedding", layer, e)
            b.after_wgrad(partial(self._ready, ready, layer, name, final))
        return hidden

    def _ready(self, ready: list, layer: int, name: str, final: bool) -> None:
        """A depth's weight gradients are done: into the stage's buckets, and FSDP's."""
        dense, expert, _ = self.k.unit_parameters(layer)
        last = self.b.last_wgrad
        ready.append(((dense, expert), (last,) if last is not None else ()))
        self.fsdp.after_backward(self.fsdp.unit(layer), name, layer, last, final)
