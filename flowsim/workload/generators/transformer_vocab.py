"""The kernels of the vocabulary's layers on one rank for one micro-batch: the
vocabulary-parallel embedding, and the output layer with its cross entropy (a plain PyTorch
linear layer in Megatron-LM, so 16-bit in FP8 training), split from
:mod:`.transformer_kernels`, whose :class:`~.transformer_kernels.LayerKernels` they are part
of."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..kernels import Kernel
from .transformer_shapes import ACT, CROSS_ENTROPY, METRIC_BYTES, LayerShapes, elementwise


@dataclass(frozen=True)
class VocabKernels(LayerShapes):
    """The embedding's and the output layer's kernel tuples and weights."""

    @cached_property
    def embedding(self) -> tuple[Kernel, ...]:
        """The vocabulary-parallel embedding lookup: read the rows, write the activation."""
        return (elementwise(2 * self.n * self.spec.hidden * ACT, "embedding"),)

    @cached_property
    def embedding_backward(self) -> tuple[Kernel, ...]:
        if self.spec.frozen:   # and no input needs a gradient
            return ()
        return (elementwise(3 * self.n * self.spec.hidden * ACT, "embedding_backward"),)

    @property
    def vocab_shard(self) -> int:
        return self.spec.padded_vocab // self.spec.tp

    @cached_property
    def logits(self) -> tuple[Kernel, ...]:
        """Output layer and vocabulary-parallel cross entropy, priced by the bytes its steps
        move per logit (:data:`CROSS_ENTROPY`)."""
        forward = CROSS_ENTROPY[self.spec.cross_entropy].forward
        return (self._gemm16(self.n, self.vocab_shard, self.spec.hidden),
                elementwise(forward * self.n * self.vocab_shard, "cross_entropy"))

    @cached_property
    def train_metrics(self) -> tuple[Kernel, ...]:
        """The training metrics' cross entropies over the logits (:data:`METRIC_BYTES`)."""
        return (elementwise(METRIC_BYTES * self.spec.metric_cross_entropies * self.n
                            * self.vocab_shard, "train_metrics"),)

    @cached_property
    def logits_dgrad(self) -> tuple[Kernel, ...]:
        backward = CROSS_ENTROPY[self.spec.cross_entropy].backward
        return (elementwise(backward * self.n * self.vocab_shard, "cross_entropy_backward"),
                self._gemm16(self.n, self.spec.hidden, self.vocab_shard))

    @cached_property
    def logits_wgrad(self) -> tuple[Kernel, ...]:
        if self.spec.frozen:
            return ()
        return (self._gemm16(self.spec.hidden, self.vocab_shard, self.n),)

    @property
    def vocab_parameters(self) -> int:
        """Trained weights of the rank's share of the embedding (or of the output layer):
        none under LoRA."""
        return 0 if self.spec.frozen else self.vocab_shard * self.spec.hidden
