"""Low-rank adaptation (``lora_rank``): LoRA fine-tuning (Hu et al., "LoRA: Low-Rank Adaptation
of Large Language Models", arXiv 2106.09685) as Megatron-Bridge runs it.

Every base weight is frozen; each linear layer of ``lora_targets`` (Megatron-Bridge's
``LoRA.target_modules``, by default all four: ``linear_qkv``, ``linear_proj``,
``linear_fc1``, ``linear_fc2``, ``src/megatron/bridge/peft/lora.py``) gains an adapter
``y += (alpha / r) B (A x)``, ``A`` of ``k x r`` and ``B`` of ``r x width`` for a ``k``-in,
``width``-out layer, in 16 bits
(also in FP8 training: the adapters are PyTorch linear layers). Per layer and micro-batch:

* forward: the base GEMM, the adapter's two GEMMs, and the scaling and the addition to the
  base output (read twice and written once, read and written once);
* backward: the base data gradient (the input's gradient is still needed), the adapter's
  two data-gradient GEMMs and two weight-gradient GEMMs, the scaling's backward and the
  addition of the adapter's input gradient to the base one; no weight gradient of any base
  weight, none of the embedding or the output layer (frozen: the embedding's backward is
  skipped altogether, as no input needs a gradient there);
* in FP8 training a frozen layer's casts write the one layout its data GEMMs read
  (Transformer Engine asks for the weight gradient's column-wise copy only when the weight
  requires a gradient): MXFP8 and NVFP4 write half their copies, Hopper's per-tensor casts
  no transpose;
* the data-parallel gradient reduction, the distributed optimizer's shards and gathers and
  the optimizer step cover the adapters alone (frozen weights have no gradient buffer and
  no optimizer state); a frozen layer without an adapter keeps no input for a weight
  gradient (QKV's and FC1's, their norms' outputs, and FC2's).

Scope: one tensor-parallel rank (Megatron-Bridge's adapters add their own tensor-parallel
all-gathers and all-reduces, not modelled), dense layers (no experts, no latent attention,
no multi-token prediction), no FSDP.
"""

from __future__ import annotations

from ..kernels import Kernel
from .transformer_shapes import ACT, LayerShapes, elementwise


class LoraShapes(LayerShapes):
    """The adapters' kernels and parameters of one layer on one rank (nothing without
    ``lora_rank``)."""

    def _rank(self, target: str) -> int:
        """The adapter rank of ``target`` (0: no adapter there)."""
        return self.spec.lora_rank if target in self.spec.lora_targets else 0

    def lora_forward(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """The adapter of ``target``, a ``k``-in, ``width``-out layer, in the forward: ``A``,
        ``B``, then the scaling and the addition to the base output."""
        r = self._rank(target)
        if not r:
            return ()
        return (self._gemm16(self.n, r, k), self._gemm16(self.n, width, r),
                elementwise(5 * self.n * width * ACT, "lora_scale_add"))

    def lora_dgrad(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """Its data gradient: the scaling's backward, through ``B`` and ``A``, added to the
        base layer's input gradient."""
        r = self._rank(target)
        if not r:
            return ()
        return (elementwise(2 * self.n * width * ACT, "lora_scale_backward"),
                self._gemm16(self.n, r, width), self._gemm16(self.n, k, r),
                elementwise(3 * self.n * k * ACT, "lora_add_backward"))

    def lora_wgrad(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """Its weight gradients: ``B``'s and ``A``'s."""
        r = self._rank(target)
        return (self._gemm16(r, width, self.n), self._gemm16(k, r, self.n)) if r else ()

    @property
    def lora_widths(self) -> dict[str, tuple[int, int]]:
        """(in, out) widths of the layers an adapter can target."""
        h = self.spec.hidden
        return {"linear_qkv": (h, self.q + 2 * self.kv), "linear_proj": (self.q, h),
                "linear_fc1": (h, self.fc1_out), "linear_fc2": (self.f, h)}

    @property
    def lora_parameters(self) -> int:
        """Weights of one layer's adapters on the rank (``r (k + width)`` each)."""
        return sum(self._rank(t) * (k + width) for t, (k, width) in self.lora_widths.items())
