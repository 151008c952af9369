"""The kernels of one transformer layer on one rank for one micro-batch, and the sizes of its
communication: Megatron-LM's layer, pass by pass (formulas in :mod:`.transformer`).

Everything here is per rank: ``n = b s / cp`` tokens of the rank's sequence shard, ``n / t``
of them in the sequence-parallel regions (norms, dropout, residual adds) when ``sp``; weights
split ``t`` ways by tensor parallelism. Activations are 16-bit (also in FP8 training, whose
GEMMs alone run in FP8).

FP8 training is Transformer Engine's (NVIDIA, "Using FP8 with Transformer Engine"): only the
linear layers of the transformer layers run in FP8. Each casts its 16-bit input to FP8 and
keeps an FP8 transpose of it for the weight gradient (Hopper's FP8 GEMMs take ``TN`` operands
only), and casts the incoming gradient the same way in the backward pass: one fused
cast-transpose per operand, reading 2 bytes and writing 2 x 1 byte per element
(:data:`FP8_CAST_BYTES`). Weights are cast once per iteration, not per micro-batch (left out).
Megatron-LM's output layer and MoE router are plain PyTorch linear layers
(``tensor_parallel.ColumnParallelLinear``, ``torch.nn.functional.linear`` in
``megatron/core``), so they stay 16-bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ..kernels import Attention, Elementwise, Gemm, Kernel
from .transformer_checks import cp_kind
from .transformer_spec import TransformerSpec

#: bytes of an activation element (16-bit)
ACT = 2
#: bytes one FP8 cast-transpose moves per element: read 16-bit, write FP8 and its transpose
FP8_CAST_BYTES = ACT + 1 + 1


def _ew(nbytes: float, name: str) -> Elementwise:
    return Elementwise(float(nbytes), name=name)


@dataclass(frozen=True)
class LayerKernels:
    """The kernel tuples of one layer's blocks and its communication sizes (one rank, one
    micro-batch). Blocks run between communication points; see :mod:`.transformer_passes`."""

    spec: TransformerSpec

    # ------------------------------------------------------------------ shapes
    @property
    def n(self) -> int:
        """Tokens of the rank's sequence shard."""
        return self.spec.micro_batch * self.spec.sequence // self.spec.cp

    @property
    def n_sp(self) -> int:
        """Tokens in the sequence-parallel regions."""
        return self.n // self.spec.tp if self.spec.sp else self.n

    @property
    def q(self) -> int:
        """Query (and output projection) width of the rank."""
        return self.spec.heads * self.spec.head_dim // self.spec.tp

    @property
    def kv(self) -> int:
        """Key (= value) width of the rank: its key/value heads, at least one."""
        return max(1, self.spec.kv_heads // self.spec.tp) * self.spec.head_dim

    @property
    def f(self) -> int:
        """MLP inner width of the rank."""
        return self.spec.ffn // self.spec.tp

    @property
    def fc1_out(self) -> int:
        return (2 if self.spec.gated_mlp else 1) * self.f

    def _gemm(self, m: int, n: int, k: int, batch: int = 1) -> Gemm:
        """A GEMM of a transformer layer's linear layers (FP8 in FP8 training)."""
        dtype = "bf16" if self.spec.dtype == "fp16" else self.spec.dtype
        return Gemm(int(m), int(n), int(k), int(batch), dtype)

    def _gemm16(self, m: int, n: int, k: int, batch: int = 1) -> Gemm:
        """A GEMM that stays 16-bit in FP8 training (output layer, router)."""
        return Gemm(int(m), int(n), int(k), int(batch), "bf16")

    def _cast(self, elements: int) -> tuple[Kernel, ...]:
        """FP8 training's cast-transpose of one GEMM operand of ``elements`` (none
        otherwise)."""
        if self.spec.dtype != "fp8":
            return ()
        return (_ew(FP8_CAST_BYTES * elements, "fp8_cast_transpose"),)

    # ------------------------------------------------------------------ communication
    @property
    def activation_bytes(self) -> int:
        """A full ``n x h`` activation (the buffer of a tensor-parallel all-reduce or
        reduce-scatter)."""
        return self.n * self.spec.hidden * ACT

    @property
    def shard_bytes(self) -> int:
        """A sequence-parallel shard of it (each NPU's input of the all-gather)."""
        return self.activation_bytes // self.spec.tp

    @property
    def gather_bytes(self) -> int:
        """Each NPU's input of a transformer layer's all-gathers (sequence parallelism): its
        shard, in FP8 training one byte per element (Transformer Engine casts before it
        gathers: the layer norm's output forward, the output gradient backward; v1.11
        ``layernorm_linear.py``, ``base.py`` ``grad_output_preprocess``)."""
        return self.shard_bytes // ACT if self.spec.dtype == "fp8" else self.shard_bytes

    @property
    def kv_bytes(self) -> int:
        """The rank's keys and values (context parallelism exchanges them)."""
        return 2 * self.n * self.kv * ACT

    # ------------------------------------------------------------------ forward
    @cached_property
    def norm(self) -> tuple[Kernel, ...]:
        return (_ew(2 * self.n_sp * self.spec.hidden * ACT, "layernorm"),)

    @cached_property
    def residual(self) -> tuple[Kernel, ...]:
        """Bias, dropout and residual add (fused): two reads, a write and a one-byte mask."""
        return (_ew(self.n_sp * self.spec.hidden * (3 * ACT + 1), "dropout_add"),)

    @cached_property
    def rope(self) -> tuple[Kernel, ...]:
        """Rotary embeddings: the queries and keys read and written once (Transformer
        Engine's fused kernel), after the QKV GEMM; its backward rotates their gradients the
        same way, before the QKV data gradient (and before that layer's backward gathers
        its input again: Megatron-Core applies the rotation outside the linear layer)."""
        if self.spec.position_embedding != "rope":
            return ()
        return (_ew(2 * self.n * (self.q + self.kv) * ACT, "rope"),)

    @cached_property
    def qkv(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.spec.hidden),
                self._gemm(self.n, self.q + 2 * self.kv, self.spec.hidden))

    @cached_property
    def core_attention(self) -> tuple[Kernel, ...]:
        """Scores, softmax and values: one flash kernel per context-parallel ring step (the
        local, causal step first), or Megatron's unfused batched GEMMs and softmax."""
        s = self.spec
        if s.attention != "unfused":
            return self._flash(backward=False)
        scores = s.micro_batch * (s.heads // s.tp) * s.sequence * s.sequence
        batch = s.micro_batch * (s.heads // s.tp)
        return (self._gemm(s.sequence, s.sequence, s.head_dim, batch),
                _ew(2 * scores * ACT, "softmax"), _ew(scores * (2 * ACT + 1), "dropout"),
                self._gemm(s.sequence, s.head_dim, s.sequence, batch))

    def _flash(self, *, backward: bool) -> tuple[Kernel, ...]:
        s = self.spec
        heads, local = s.heads // s.tp, s.sequence // s.cp
        kv_heads = max(1, s.kv_heads // s.tp)
        if cp_kind(s) == "a2a":   # Ulysses: 1 / cp of the heads over every token
            return (Attention(s.micro_batch, heads // s.cp, s.sequence, s.sequence, s.head_dim,
                              kv_heads // s.cp, backward=backward, implementation=s.attention),)
        out = [Attention(s.micro_batch, heads, local, local, s.head_dim, kv_heads, causal=True,
                         backward=backward, implementation=s.attention, window=s.window)]
        return tuple(out + [Attention(   # the other steps: half another rank's keys each
            s.micro_batch, heads, local, local // 2, s.head_dim, kv_heads, causal=False,
            backward=backward, implementation=s.attention)] * (s.cp - 1))

    @cached_property
    def projection(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.q), self._gemm(self.n, self.spec.hidden, self.q))

    @cached_property
    def fc1(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h), self._gemm(self.n, self.fc1_out, h))

    @cached_property
    def activation(self) -> tuple[Kernel, ...]:
        """Bias-GeLU, or SwiGLU."""
        act = (3 if self.spec.gated_mlp else 2) * self.n * self.f * ACT
        return (_ew(act, "activation"),)

    @cached_property
    def fc2(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.f), self._gemm(self.n, self.spec.hidden, self.f))

    # ------------------------------------------------------------------ backward
    @cached_property
    def norm_backward(self) -> tuple[Kernel, ...]:
        return (_ew(3 * self.n_sp * self.spec.hidden * ACT, "layernorm_backward"),)

    @cached_property
    def residual_backward(self) -> tuple[Kernel, ...]:
        return (_ew(self.n_sp * self.spec.hidden * (3 * ACT + 1), "dropout_add_backward"),)

    @cached_property
    def fc2_dgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h), self._gemm(self.n, self.f, h))

    @cached_property
    def activation_backward(self) -> tuple[Kernel, ...]:
        act = (5 if self.spec.gated_mlp else 3) * self.n * self.f * ACT
        return (_ew(act, "activation_backward"),)

    @cached_property
    def fc1_dgrad(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.fc1_out),
                self._gemm(self.n, self.spec.hidden, self.fc1_out))

    @cached_property
    def mlp_wgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (self._gemm(self.f, h, self.n), self._gemm(h, self.fc1_out, self.n))

    @cached_property
    def attention_dgrad(self) -> tuple[Kernel, ...]:
        """Projection data gradient, attention backward, rotary backward, QKV data
        gradient."""
        return self.projection_dgrad + self.core_attention_backward + self.rope + \
            self.qkv_dgrad

    @cached_property
    def projection_dgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        return (*self._cast(self.n * s.hidden), self._gemm(self.n, self.q, s.hidden))

    @cached_property
    def core_attention_backward(self) -> tuple[Kernel, ...]:
        s = self.spec
        if s.attention != "unfused":
            return self._flash(backward=True)
        scores = s.micro_batch * (s.heads // s.tp) * s.sequence * s.sequence
        batch = s.micro_batch * (s.heads // s.tp)
        gemm = self._gemm(s.sequence, s.head_dim, s.sequence, batch)
        return (self._gemm(s.sequence, s.sequence, s.head_dim, batch), gemm,
                _ew(scores * (3 * ACT + 1), "softmax_dropout_backward"), gemm, gemm)

    @cached_property
    def qkv_dgrad(self) -> tuple[Kernel, ...]:
        """The QKV data gradient: the tail of :attr:`attention_dgrad` (context parallelism
        runs it after the key and value gradients are reduced)."""
        width = self.q + 2 * self.kv
        return (*self._cast(self.n * width), self._gemm(self.n, self.spec.hidden, width))

    @cached_property
    def attention_wgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (self._gemm(self.q, h, self.n), self._gemm(h, self.q + 2 * self.kv, self.n))

    # ------------------------------------------------------------------ mixture of experts
    @property
    def moe_tokens(self) -> int:
        """Tokens a rank routes: its sequence-parallel shard (Megatron-LM needs sequence
        parallelism with MoE and TP)."""
        return self.n_sp

    @property
    def expert_tokens(self) -> int:
        """Tokens each local expert receives: the EP group's routed tokens spread evenly over
        the experts, times the capacity factor."""
        s = self.spec
        return max(1, round(s.ep * self.moe_tokens * s.top_k * s.capacity_factor / s.experts))

    @property
    def expert_rows(self) -> int:
        """Tokens a local expert's GEMMs see on this rank: those it receives, gathered over
        the tensor-parallel ranks when it is split over them (``expert_tp = tp``: Megatron-
        Core's all-to-all dispatcher all-gathers the received tokens over TP after the
        all-to-all and reduce-scatters the experts' output before the one back)."""
        return self.expert_tokens * self.spec.expert_tp

    @property
    def expert_width(self) -> int:
        """The rank's share of an expert's inner width (``moe_ffn / expert_tp``)."""
        return self.spec.moe_ffn // self.spec.expert_tp

    @property
    def dispatch_bytes(self) -> int:
        """Each rank's all-to-all buffer when dispatching (and combining) tokens."""
        s = self.spec
        return int(self.moe_tokens * s.top_k * s.capacity_factor * s.hidden * ACT)

    @cached_property
    def router(self) -> tuple[Kernel, ...]:
        s = self.spec
        return (self._gemm16(self.moe_tokens, s.experts, s.hidden),
                _ew(2 * self.moe_tokens * s.experts * 4, "router_softmax_topk"))

    @cached_property
    def experts(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f = s.experts // s.ep, self.expert_rows, self.expert_width
        act = (3 if s.gated_mlp else 2) * m * f * ACT * local
        return (*self._cast(m * s.hidden * local),
                self._gemm(m, (2 if s.gated_mlp else 1) * f, s.hidden, local),
                _ew(act, "expert_activation"), *self._cast(m * f * local),
                self._gemm(m, s.hidden, f, local))

    @cached_property
    def experts_dgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f = s.experts // s.ep, self.expert_rows, self.expert_width
        act = (5 if s.gated_mlp else 3) * m * f * ACT * local
        fc1 = (2 if s.gated_mlp else 1) * f
        return (*self._cast(m * s.hidden * local), self._gemm(m, f, s.hidden, local),
                _ew(act, "expert_activation_backward"), *self._cast(m * fc1 * local),
                self._gemm(m, s.hidden, fc1, local),
                self._gemm16(self.moe_tokens, s.hidden, s.experts))

    @cached_property
    def experts_wgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f = s.experts // s.ep, self.expert_rows, self.expert_width
        return (self._gemm(f, s.hidden, m, local),
                self._gemm(s.hidden, (2 if s.gated_mlp else 1) * f, m, local),
                self._gemm16(s.hidden, s.experts, self.moe_tokens))

    # ------------------------------------------------------------------ embedding, logits
    @cached_property
    def embedding(self) -> tuple[Kernel, ...]:
        """The vocabulary-parallel embedding lookup: read the rows, write the activation."""
        return (_ew(2 * self.n * self.spec.hidden * ACT, "embedding"),)

    @cached_property
    def embedding_backward(self) -> tuple[Kernel, ...]:
        return (_ew(3 * self.n * self.spec.hidden * ACT, "embedding_backward"),)

    @property
    def vocab_shard(self) -> int:
        return self.spec.padded_vocab // self.spec.tp

    @cached_property
    def logits(self) -> tuple[Kernel, ...]:
        """Output layer and vocabulary-parallel cross entropy (FP32 logits: max, exp-sum and
        the loss read them three times)."""
        return (self._gemm16(self.n, self.vocab_shard, self.spec.hidden),
                _ew(3 * self.n * self.vocab_shard * 4, "cross_entropy"))

    @cached_property
    def logits_dgrad(self) -> tuple[Kernel, ...]:
        return (_ew(2 * self.n * self.vocab_shard * 4, "cross_entropy_backward"),
                self._gemm16(self.n, self.spec.hidden, self.vocab_shard))

    @cached_property
    def logits_wgrad(self) -> tuple[Kernel, ...]:
        return (self._gemm16(self.spec.hidden, self.vocab_shard, self.n),)

    @property
    def vocab_parameters(self) -> int:
        """Weights of the rank's share of the embedding (or of the output layer)."""
        return self.vocab_shard * self.spec.hidden

    # ------------------------------------------------------------------ parameters
    @cached_property
    def dense_parameters(self) -> int:
        """Weights of the rank's share of one layer outside the experts (attention, norms,
        the dense MLP or the router)."""
        s, h = self.spec, self.spec.hidden
        mlp = h * s.experts if s.experts else (3 if s.gated_mlp else 2) * h * self.f
        if s.shared_ffn:
            mlp += (3 if s.gated_mlp else 2) * h * (s.shared_ffn // s.tp)
        return self.attention_parameters + mlp + 2 * h

    @property
    def attention_parameters(self) -> int:
        return self.spec.hidden * (self.q + 2 * self.kv) + self.q * self.spec.hidden

    @cached_property
    def _dense_layer(self) -> LayerKernels:
        return type(self)(replace(self.spec, experts=0, top_k=0, shared_ffn=0,
                                  moe_layer_freq=()))

    def of_layer(self, layer: int) -> LayerKernels:
        """The kernels of ``layer``: these, or a dense MLP's (width ``ffn``) for a dense
        layer of a mixture of experts (``moe_layer_freq``), and full attention's for a layer
        the sliding window skips (``window_skip_freq``)."""
        s = self.spec
        k = self if not s.experts or s.is_moe(layer) else self._dense_layer
        return k if not s.window or s.is_windowed(layer) else k._full_attention

    @cached_property
    def _full_attention(self) -> LayerKernels:
        return type(self)(replace(self.spec, window=0, window_skip_freq=()))

    @cached_property
    def shared_expert(self) -> LayerKernels | None:
        """The shared experts' kernels, a dense MLP of their width split over the TP ranks as
        the dense MLP is (Megatron-Core's ``SharedExpertMLP``); None without them."""
        s = self.spec
        return LayerKernels(replace(s, ffn=s.shared_ffn, experts=0, shared_ffn=0)) \
            if s.shared_ffn else None

    @cached_property
    def expert_parameters(self) -> int:
        """Weights of the rank's experts in one layer (0 for a dense model)."""
        s = self.spec
        if not s.experts:
            return 0
        return (s.experts // s.ep) * (3 if s.gated_mlp else 2) * s.hidden * self.expert_width
