"""The kernels of one transformer layer on one rank for one micro-batch, and the sizes of its
communication: Megatron-LM's layer, pass by pass (formulas in :mod:`.transformer`). Per-rank
shapes are :mod:`.transformer_shapes`'s, a mixture of experts' kernels
:mod:`.transformer_experts`'s.

FP8 training is Transformer Engine's (NVIDIA, "Using FP8 with Transformer Engine"): only the
linear layers of the transformer layers run in FP8. Each casts its 16-bit input to FP8 in
the layouts its forward and weight-gradient GEMMs read, and casts the incoming gradient the
same way in the backward pass: one :class:`~flowsim.workload.kernels.Quantize` per operand,
whose traffic depends on the scaling recipe (``fp8_recipe``) and the device
(:func:`~flowsim.workload.kernels.quantize_bytes`). Weights are cast once per iteration, not
per micro-batch (left out).
Megatron-LM's output layer and MoE router are plain PyTorch linear layers
(``tensor_parallel.ColumnParallelLinear``, ``torch.nn.functional.linear`` in
``megatron/core``), so they stay 16-bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, partial

from ..kernels import Attention, Kernel
from .transformer_checks import cp_kind
from .transformer_experts import ExpertKernels
from .transformer_mamba import MambaKernels
from .transformer_precision import in_precision
from .transformer_shapes import ACT, elementwise, fp8_input_store
from .transformer_vocab import VocabKernels

#: the layer's Transformer Engine modules, by their paths in Megatron-Core's layer (a
#: precision per module: :mod:`.transformer_precision`)
QKV, PROJ = "self_attention.linear_qkv", "self_attention.linear_proj"
FC1, FC2 = "mlp.linear_fc1", "mlp.linear_fc2"
SHARED_FC1, SHARED_FC2 = "mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"
EH_PROJ = "eh_proj"


@dataclass(frozen=True)
class LayerKernels(ExpertKernels, VocabKernels):
    """The kernel tuples of one layer's blocks and its communication sizes (one rank, one
    micro-batch). Blocks run between communication points; see :mod:`.transformer_passes`.
    Its shapes and sizes come from :class:`~.transformer_shapes.LayerShapes`, the experts'
    kernels from :class:`~.transformer_experts.ExpertKernels`, the embedding's and the
    output layer's from :class:`~.transformer_vocab.VocabKernels`."""

    # ------------------------------------------------------------------ forward
    @cached_property
    def norm(self) -> tuple[Kernel, ...]:
        return (elementwise(2 * self.n_sp * self.spec.hidden * ACT, "layernorm"),)

    @cached_property
    def residual(self) -> tuple[Kernel, ...]:
        """Bias, dropout and residual add (fused): two reads, a write and a one-byte mask."""
        return (elementwise(self.n_sp * self.spec.hidden * (3 * ACT + 1), "dropout_add"),)

    @cached_property
    def rope(self) -> tuple[Kernel, ...]:
        """Rotary embeddings: the queries and keys read and written once (Transformer
        Engine's fused kernel), after the QKV GEMM; its backward rotates their gradients the
        same way, before the QKV data gradient (and before that layer's backward gathers
        its input again: Megatron-Core applies the rotation outside the linear layer)."""
        if self.spec.position_embedding != "rope":
            return ()
        return (elementwise(2 * self.n * (self.q + self.kv) * ACT, "rope"),)

    @cached_property
    def qkv(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h, module=QKV),
                self._gemm(self.n, self.q + 2 * self.kv, h, module=QKV),
                *self.lora_forward("linear_qkv", h, self.q + 2 * self.kv),
                *self._attention_casts(backward=False))

    @cached_property
    def core_attention(self) -> tuple[Kernel, ...]:
        """Scores, softmax and values: one flash kernel per context-parallel ring step (the
        local, causal step first), or Megatron's unfused batched GEMMs and softmax."""
        s = self.spec
        if s.attention != "unfused":
            return self._in_precision(self._flash(backward=False))
        scores = s.micro_batch * (s.heads // s.tp) * s.sequence * s.sequence
        batch = s.micro_batch * (s.heads // s.tp)
        return (self._gemm(s.sequence, s.sequence, s.head_dim, batch),
                elementwise(2 * scores * ACT, "softmax"),
                elementwise(scores * (2 * ACT + 1), "dropout"),
                self._gemm(s.sequence, s.head_dim, s.sequence, batch))

    def _flash(self, *, backward: bool) -> tuple[Attention, ...]:
        s = self.spec
        heads, local = s.heads // s.tp, s.sequence // s.cp
        kv_heads = max(1, s.kv_heads // s.tp)
        if cp_kind(s) == "a2a":   # Ulysses: 1 / cp of the heads over every token
            return (Attention(s.micro_batch, heads // s.cp, s.sequence, s.sequence, s.head_dim,
                              kv_heads // s.cp, backward=backward, implementation=s.attention),)
        if s.document_tokens:   # packed documents, each attending to itself
            docs, rest = divmod(s.sequence, s.document_tokens)
            return tuple(Attention(s.micro_batch * count, heads, length, length, s.head_dim,
                                   kv_heads, causal=True, backward=backward,
                                   implementation=s.attention)
                         for count, length in ((docs, s.document_tokens), (1, rest)) if length)
        out = [Attention(s.micro_batch, heads, local, local, s.head_dim, kv_heads, causal=True,
                         backward=backward, implementation=s.attention, window=s.window)]
        return tuple(out + [Attention(   # the other steps: half another rank's keys each
            s.micro_batch, heads, local, local // 2, s.head_dim, kv_heads, causal=False,
            backward=backward, implementation=s.attention)] * (s.cp - 1))

    @cached_property
    def projection(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.q, module=PROJ),
                self._gemm(self.n, self.spec.hidden, self.q, module=PROJ),
                *self.lora_forward("linear_proj", self.q, self.spec.hidden))

    @cached_property
    def fc1(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h, module=FC1), self._gemm(self.n, self.fc1_out, h,
                                                                module=FC1),
                *self.lora_forward("linear_fc1", h, self.fc1_out))

    @cached_property
    def activation(self) -> tuple[Kernel, ...]:
        """Bias-GeLU, or SwiGLU."""
        act = (3 if self.spec.gated_mlp else 2) * self.n * self.f * ACT
        return (elementwise(act, "activation"),
                *fp8_input_store(self.spec, self.n * self.fc1_out, backward=False))

    @cached_property
    def fc2(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.f, module=FC2),
                self._gemm(self.n, self.spec.hidden, self.f, module=FC2),
                *self.lora_forward("linear_fc2", self.f, self.spec.hidden))

    @property
    def attention_matmuls(self) -> tuple[tuple[Kernel, ...], ...]:
        """The attention's matmuls in the order torchtitan's Llama runs them: wq wk wv wo."""
        h = self.spec.hidden
        qkv = partial(self._linear, module=QKV)
        return qkv(self.q, h), qkv(self.kv, h), qkv(self.kv, h), self._linear(h, self.q,
                                                                          module=PROJ)

    @cached_property
    def alternate_matmuls(self) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
        """What torchtitan's per-op selective recomputation (``selective_ac_option: op``,
        ``torchtitan/models/llama3/parallelize_llama.py``; the MoE models' lists add the
        all-to-alls, ``torchtitan/models/deepseek_v3/infra/parallelize.py``) re-runs before
        a layer's backward, attention side and MLP side. Its policy saves the outputs of the
        attention kernel, of the reduce-scatters and all-to-alls and of a layer's first,
        third, ... matmul, counted in the order the layer runs them
        (:attr:`attention_matmuls`, then ``w1 w3 w2`` gated or ``w1 w2``; a mixture of
        experts' router, then its shared experts' ``w1 w3 w2``); everything else runs again:
        the even matmuls, the routed experts' grouped GEMMs (not matmuls to the policy), the
        norms, the rotation, the activation, the residual adds."""
        s, h = self.spec, self.spec.hidden
        moe = s.experts > 0
        width = s.shared_ffn // s.tp if moe else self.f
        mlp: tuple[tuple[Kernel, ...], ...] = ((self.router[0],),) if moe else ()
        if width:
            fc1, fc2 = partial(self._linear, module=FC1), partial(self._linear, module=FC2)
            if moe:
                fc1 = partial(self._linear, module=SHARED_FC1)
                fc2 = partial(self._linear, module=SHARED_FC2)
            mlp += (fc1(width, h), fc1(width, h), fc2(h, width)) if s.gated_mlp else \
                (fc1(width, h), fc2(h, width))
        attention = self.attention_matmuls
        again = [k for i, k in enumerate(attention + mlp) if i % 2]   # the 2nd, 4th, ...
        split = len(attention) // 2
        shared = self.shared_expert
        activation = (self.experts + (shared.activation if shared is not None else ())) \
            if moe else self.activation
        return ((*self.norm, *sum(again[:split], ()), *self.rope),
                (*self.residual, *self.norm, *sum(again[split:], ()), *activation,
                 *self.residual))

    # ------------------------------------------------------------------ backward
    @cached_property
    def norm_backward(self) -> tuple[Kernel, ...]:
        return (elementwise(3 * self.n_sp * self.spec.hidden * ACT, "layernorm_backward"),)

    @cached_property
    def residual_backward(self) -> tuple[Kernel, ...]:
        return (elementwise(self.n_sp * self.spec.hidden * (3 * ACT + 1), "dropout_add_backward"),)

    @cached_property
    def fc2_dgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h, module=FC2), self._gemm(self.n, self.f, h, module=FC2),
                *self.lora_dgrad("linear_fc2", self.f, h))

    @cached_property
    def activation_backward(self) -> tuple[Kernel, ...]:
        act = (5 if self.spec.gated_mlp else 3) * self.n * self.f * ACT
        return (*fp8_input_store(self.spec, self.n * self.fc1_out, backward=True),
                elementwise(act, "activation_backward"))

    @cached_property
    def fc1_dgrad(self) -> tuple[Kernel, ...]:
        return (*self._cast(self.n * self.fc1_out, module=FC1),
                self._gemm(self.n, self.spec.hidden, self.fc1_out, module=FC1),
                *self.lora_dgrad("linear_fc1", self.spec.hidden, self.fc1_out))

    @cached_property
    def mlp_wgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        if self.spec.frozen:   # the adapters' alone
            return (*self.lora_wgrad("linear_fc2", self.f, h),
                    *self.lora_wgrad("linear_fc1", h, self.fc1_out))
        return (self._gemm(self.f, h, self.n, module=FC2),
                self._gemm(h, self.fc1_out, self.n, module=FC1))

    @cached_property
    def attention_dgrad(self) -> tuple[Kernel, ...]:
        """Projection data gradient, attention backward, rotary backward, QKV data
        gradient."""
        return self.projection_dgrad + self.core_attention_backward + self.rope + \
            self.qkv_dgrad

    @cached_property
    def projection_dgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        return (*self._cast(self.n * s.hidden, module=PROJ),
                self._gemm(self.n, self.q, s.hidden, module=PROJ),
                *self.lora_dgrad("linear_proj", self.q, s.hidden),
                *self._attention_casts(backward=True))

    @cached_property
    def core_attention_backward(self) -> tuple[Kernel, ...]:
        s = self.spec
        if s.attention != "unfused":
            return self._in_precision(self._flash(backward=True))
        scores = s.micro_batch * (s.heads // s.tp) * s.sequence * s.sequence
        batch = s.micro_batch * (s.heads // s.tp)
        gemm = self._gemm(s.sequence, s.head_dim, s.sequence, batch)
        return (self._gemm(s.sequence, s.sequence, s.head_dim, batch), gemm,
                elementwise(scores * (3 * ACT + 1), "softmax_dropout_backward"), gemm, gemm)

    @cached_property
    def qkv_dgrad(self) -> tuple[Kernel, ...]:
        """The QKV data gradient: the tail of :attr:`attention_dgrad` (context parallelism
        runs it after the key and value gradients are reduced)."""
        width = self.q + 2 * self.kv
        return (*self._cast(self.n * width, module=QKV),
                self._gemm(self.n, self.spec.hidden, width, module=QKV),
                *self.lora_dgrad("linear_qkv", self.spec.hidden, width))

    @cached_property
    def attention_wgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        if self.spec.frozen:   # the adapters' alone
            return (*self.lora_wgrad("linear_proj", self.q, h),
                    *self.lora_wgrad("linear_qkv", h, self.q + 2 * self.kv))
        return (self._gemm(self.q, h, self.n, module=PROJ),
                self._gemm(h, self.q + 2 * self.kv, self.n, module=QKV))

    # ------------------------------------------------------------------ multi-token prediction
    # (Megatron-Core's ``MultiTokenPredictionLayer``: the next tokens' embedding and the
    # hidden state normed, concatenated and projected from 2h to h by a column-parallel
    # linear layer, Transformer Engine's, so FP8 in FP8 training)
    @cached_property
    def mtp_inputs(self) -> tuple[Kernel, ...]:
        """The two norms (embedding, hidden state) and their concatenation."""
        return (*self.norm, *self.norm,
                elementwise(4 * self.n_sp * self.spec.hidden * ACT, "mtp_concat"))

    @cached_property
    def mtp_inputs_backward(self) -> tuple[Kernel, ...]:
        return (*self.norm_backward, *self.norm_backward,
                elementwise(4 * self.n_sp * self.spec.hidden * ACT, "mtp_split"))

    @cached_property
    def mtp_projection(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return self._linear(h // self.spec.tp, 2 * h, module=EH_PROJ)

    @cached_property
    def mtp_projection_dgrad(self) -> tuple[Kernel, ...]:
        h, t = self.spec.hidden, self.spec.tp
        return (*self._cast(self.n * h // t, module=EH_PROJ),
                self._gemm(self.n, 2 * h, h // t, module=EH_PROJ))

    @cached_property
    def mtp_projection_wgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (self._gemm(h // self.spec.tp, 2 * h, self.n, module=EH_PROJ),)

    @property
    def mtp_weights(self) -> int:
        """Weights of the rank's share of one depth outside its transformer layer: the
        projection (``2 h x h``, split over TP) and three norms (embedding, hidden state,
        output)."""
        h = self.spec.hidden
        return 2 * h * h // self.spec.tp + 3 * h

    # ------------------------------------------------------------------ parameters
    @cached_property
    def dense_parameters(self) -> int:
        """Weights of the rank's share of one layer outside the experts (attention, norms,
        the dense MLP or the router)."""
        s, h = self.spec, self.spec.hidden
        mlp = h * s.experts + self.latent_parameters if s.experts else \
            (3 if s.gated_mlp else 2) * h * self.f
        if s.shared_ffn:
            mlp += (3 if s.gated_mlp else 2) * h * (s.shared_ffn // s.tp)
        return self.attention_parameters + mlp + 2 * h

    def unit_parameters(self, layer: int) -> tuple[int, int, int]:
        """(dense, expert, dense weights FP8 training keeps in FP8) of the rank's share of
        ``layer``; a multi-token prediction depth's (``layer >= layers``) with its projection
        and norms, the first depth's also with its own copy of the embedding where its rank
        holds none (untied, on another rank: Megatron-Core builds one for MTP)."""
        s, k = self.spec, self.of_layer(layer)
        if s.frozen:   # the trained ones: the adapters
            return k.lora_parameters, 0, 0
        if s.mtp_repeated and layer > s.layers:   # the first depth's, run again
            return 0, 0, 0
        dense, expert = k.dense_parameters, k.expert_parameters
        if layer < s.layers and s.hybrid_pattern:   # a mixer with its norm, or an MLP
            mixer = s.mixer(layer)
            if mixer:
                dense = (self.mamba.parameters if mixer == "mamba" else
                         self.attention_parameters) + s.hidden
                return dense, 0, dense
            dense -= k.attention_parameters + s.hidden
        if layer < s.layers:
            return dense, expert, dense
        fp8 = dense + 2 * s.hidden * s.hidden // s.tp
        dense += self.mtp_weights
        if layer == s.layers and not s.tied_embeddings and not s.ends_on_one_rank:
            dense += self.vocab_parameters
        return dense, expert, fp8

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
        the sliding window skips (``window_skip_freq``), each in the layer's precision and its
        modules' (:func:`.transformer_precision.in_precision`)."""
        if layer not in self._variants:   # (one resolution per layer; equal specs share)
            spec = in_precision(self.spec, layer)
            variant = None if spec == self.spec else self._variants.get(spec)
            if variant is None and spec != self.spec:
                variant = self._variants[spec] = type(self)(spec)
            self._variants[layer] = variant   # (None: these; never self, no cycle)
        variant = self._variants[layer]
        if variant is not None:
            return variant.of_layer(layer)
        s = self.spec
        k = self if not s.experts or s.is_moe(layer) else self._dense_layer
        return k if not s.window or s.is_windowed(layer) else k._full_attention

    @cached_property
    def _variants(self) -> dict[object, LayerKernels | None]:
        """These kernels in each layer's precision, by layer and by spec."""
        return {}

    @cached_property
    def _full_attention(self) -> LayerKernels:
        return type(self)(replace(self.spec, window=0, window_skip_freq=()))

    @cached_property
    def mamba(self) -> MambaKernels:
        """A hybrid model's Mamba-2 mixer's kernels (:mod:`.transformer_mamba`)."""
        return MambaKernels(self.spec)

    @cached_property
    def shared_expert(self) -> LayerKernels | None:
        """The shared experts' kernels, a dense MLP of their width split over the TP ranks as
        the dense MLP is (Megatron-Core's ``SharedExpertMLP``); None without them."""
        s = self.spec
        own = {SHARED_FC1: FC1, SHARED_FC2: FC2}   # their modules, as a dense MLP's
        modules = tuple((own[m], p) for m, p in s.module_precision if m in own)
        return LayerKernels(replace(s, ffn=s.shared_ffn, experts=0, shared_ffn=0,
                                    module_precision=modules)) if s.shared_ffn else None
