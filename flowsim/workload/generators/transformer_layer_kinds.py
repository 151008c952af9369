"""Which kind each layer of a transformer spec is (:class:`LayerKinds`, a base of
:class:`~.transformer_spec.TransformerSpec`): windowed or full attention, a mixture of
experts or a dense MLP, attention or a Mamba-2 mixer, with or without an MLP.
"""

from __future__ import annotations

from .transformer_hybrid import ATTENTION, MAMBA, MLP, MOE


class LayerKinds:
    """The per-layer questions a spec answers from its layer patterns (the fields named here
    are :class:`~.transformer_spec.TransformerSpec`'s)."""

    layers: int
    window: int
    window_skip_freq: tuple[int, ...] | int | None
    experts: int
    moe_layer_freq: tuple[int, ...] | int
    hybrid_pattern: str
    hybrid_mtp: str

    def is_windowed(self, layer: int) -> bool:
        """Whether ``layer`` attends through the sliding window (else to every key); depth
        ``j`` of multi-token prediction as decoder layer ``j`` (Megatron-Core numbers the
        depths' layers from 1 again)."""
        pattern = self.window_skip_freq
        index = layer if layer < self.layers else min(layer - self.layers, self.layers - 1)
        return self.window > 0 and (not pattern or bool(pattern[index]))  # type: ignore

    def is_moe(self, layer: int) -> bool:
        """Whether ``layer`` is a mixture of experts (else a dense MLP of width ``ffn``); a
        multi-token prediction layer is of the last layer's kind (Megatron-Core builds it
        from the decoder's last layer spec)."""
        pattern = self.moe_layer_freq
        if self.hybrid_mtp and layer >= self.layers:   # a hybrid model's depth: its own
            return MOE in self.hybrid_mtp
        return self.experts > 0 and (not pattern or bool(pattern[min(layer, self.layers - 1)]))  # type: ignore

    def mixer(self, layer: int) -> str:
        """What mixes ``layer``'s tokens: ``attention``, ``mamba`` or "" (a hybrid model's
        MLP layer)."""
        if not self.hybrid_pattern or layer >= self.layers:   # (a depth: attention, MLP)
            return "attention"
        kind = self.hybrid_pattern[layer]
        return "attention" if kind == ATTENTION else "mamba" if kind == MAMBA else ""

    def has_mlp(self, layer: int) -> bool:
        """Whether ``layer`` has an MLP (dense or experts): every transformer layer, a
        hybrid model's ``-`` and ``E`` layers."""
        return not self.hybrid_pattern or layer >= self.layers or \
            self.hybrid_pattern[layer] in (MLP, MOE)
