"""Multi-head latent attention (MLA): DeepSeek-AI, "DeepSeek-V2" (arXiv 2405.04434, 2024),
section 2.1; DeepSeek-V3 and Kimi K2 use it. As Megatron-Core's ``MLASelfAttention`` computes
it with Transformer Engine's layers (``multi_latent_attention.py``):

* the *down* projections, hidden ``h`` to the queries' latent ``q_lora_rank`` and to the keys'
  and values' latent ``kv_lora_rank`` plus the shared rotary key ``qk_pos_emb_head_dim``, are
  ``duplicated`` linear layers: every tensor-parallel rank holds them whole and runs them on
  its sequence-parallel shard of tokens (``n / t``), before anything is gathered;
* the latents (not the hidden state) are then all-gathered over the tensor-parallel ranks,
  normalised (the norms fused into the up projections' column-parallel layers), and projected
  *up* per head: queries to ``qk_head_dim + qk_pos_emb_head_dim``, keys and values to
  ``qk_head_dim`` and ``v_head_dim``, the rank's ``heads / t`` heads;
* rotary embedding on the queries' and the shared key's rotary parts; fused attention whose
  query and key heads are ``qk_head_dim + qk_pos_emb_head_dim`` wide and value heads
  ``v_head_dim`` (priced as one head width, their mean: the same FLOPs); the row-parallel
  output projection from ``heads * v_head_dim``, reduce-scattered as usual.

Backward mirrors it: the output projection's data gradient after the output gradient's
gather, the attention's backward, the up projections' data gradients, whose latent
gradients are reduce-scattered (with their inputs gathered again for the weight gradients),
then the down projections' data and weight gradients on the shard. Without ``q_lora_rank``
the queries are projected from the hidden state directly (a column-parallel layer on the
gathered hidden state). Left out: the duplicated weights' gradient all-reduce over the
tensor-parallel ranks (a few per cent of a layer's weights), CP and userbuffers overlap
(refused).
"""

from __future__ import annotations

from functools import cached_property

from ..kernels import Attention, Elementwise, Kernel
from .transformer_kernels import PROJ, LayerKernels
from .transformer_shapes import ACT
from .transformer_spec import TransformerSpec
from .transformer_values import LatentAttention, gathered_bytes


def layer_kernels(spec: TransformerSpec) -> LayerKernels:
    """The kernels of ``spec``'s layers: :class:`LatentKernels` with ``mla``."""
    return LatentKernels(spec) if spec.mla is not None else LayerKernels(spec)


#: the latent attention's Transformer Engine modules, by their paths in Megatron-Core's layer
Q_PROJ, Q_DOWN, Q_UP = ("self_attention.linear_q_proj", "self_attention.linear_q_down_proj",
                        "self_attention.linear_q_up_proj")
KV_DOWN, KV_UP = "self_attention.linear_kv_down_proj", "self_attention.linear_kv_up_proj"

class LatentKernels(LayerKernels):
    """:class:`~.transformer_kernels.LayerKernels` with multi-head latent attention."""

    @property
    def m(self) -> LatentAttention:
        assert self.spec.mla is not None
        return self.spec.mla

    @property
    def heads(self) -> int:
        """The rank's heads."""
        return self.spec.heads // self.spec.tp

    @property
    def q_in(self) -> int:
        """What the queries are projected up from: their latent, or the hidden state."""
        return self.m.q_lora_rank or self.spec.hidden

    @property
    def latent(self) -> int:
        """Width of a token's gathered latents: the queries' (or the hidden state), the keys'
        and values', the shared rotary key."""
        return self.q_in + self.m.kv_lora_rank + self.m.qk_pos_emb_head_dim

    @property
    def head_qk(self) -> int:
        return self.m.qk_head_dim + self.m.qk_pos_emb_head_dim

    @property
    def kv_up(self) -> int:
        """The rank's keys and values out of their up projection."""
        return self.heads * (self.m.qk_head_dim + self.m.v_head_dim)

    @property
    def attention_io(self) -> tuple[int, int]:
        """Elements of the rank's attention inputs (queries, keys, values) and output."""
        v = self.heads * self.m.v_head_dim
        return self.n * (2 * self.heads * self.head_qk + v), self.n * v

    @property
    def latent_gather_bytes(self) -> int:
        """Each rank's input of the latents' all-gather (one byte an element in FP8)."""
        return int(self.n_sp * self.latent * gathered_bytes(self.spec))

    @property
    def latent_bytes(self) -> int:
        """The gathered latents' gradient (the buffer of its reduce-scatter)."""
        return self.n * self.latent * ACT

    # ------------------------------------------------------------------ forward
    @cached_property
    def down(self) -> tuple[Kernel, ...]:
        """The down projections on the sequence-parallel shard (duplicated weights)."""
        m, h, n = self.m, self.spec.hidden, self.n_sp
        q = (self._gemm(n, m.q_lora_rank, h, module=Q_DOWN),) if m.q_lora_rank else ()
        return (*self._cast(n * h, module=KV_DOWN), *q,
                self._gemm(n, m.kv_lora_rank + m.qk_pos_emb_head_dim, h, module=KV_DOWN))

    @cached_property
    def qkv(self) -> tuple[Kernel, ...]:
        m, n = self.m, self.n
        norms = Elementwise(2.0 * n * (m.q_lora_rank + m.kv_lora_rank) * ACT,
                            name="latent_layernorm")
        qm = self.q_module
        return (norms, *self._cast(n * (self.q_in + m.kv_lora_rank), module=qm),
                self._gemm(n, self.heads * self.head_qk, self.q_in, module=qm),
                self._gemm(n, self.kv_up, m.kv_lora_rank, module=KV_UP),
                *self._attention_casts(backward=False))

    @property
    def q_module(self) -> str:
        """The module that makes the queries (its cast also prices the keys' latents')."""
        return Q_UP if self.m.q_lora_rank else Q_PROJ

    @cached_property
    def rope(self) -> tuple[Kernel, ...]:
        """The queries' rotary parts and the shared rotary key, read and written once."""
        r = self.m.qk_pos_emb_head_dim
        return (Elementwise(2.0 * self.n * (self.heads * r + r) * ACT, name="rope"),) if r else ()

    def _flash(self, *, backward: bool) -> tuple[Attention, ...]:
        s = self.spec
        width = (self.head_qk + self.m.v_head_dim) // 2   # the mean of the two: same FLOPs
        return (Attention(s.micro_batch, self.heads, s.sequence, s.sequence, width,
                          self.heads, causal=True, backward=backward,
                          implementation=s.attention, window=s.window),)

    @cached_property
    def projection(self) -> tuple[Kernel, ...]:
        v = self.heads * self.m.v_head_dim
        return (*self._cast(self.n * v, module=PROJ),
                self._gemm(self.n, self.spec.hidden, v, module=PROJ))

    @property
    def attention_matmuls(self) -> tuple[tuple[Kernel, ...], ...]:
        """The latent attention's matmuls in the order torchtitan's DeepSeek-V3 runs them:
        ``wq`` (or ``wq_a``, ``wq_b``), ``wkv_a``, ``wkv_b``, ``wo``."""
        m, h = self.m, self.spec.hidden
        queries = ((self._linear(m.q_lora_rank, h, module=Q_DOWN),
                    self._linear(self.heads * self.head_qk, m.q_lora_rank, module=Q_UP))
                   if m.q_lora_rank else
                   (self._linear(self.heads * self.head_qk, h, module=Q_PROJ),))
        return (*queries, self._linear(m.kv_lora_rank + m.qk_pos_emb_head_dim, h,
                                       module=KV_DOWN),
                self._linear(self.kv_up, m.kv_lora_rank, module=KV_UP),
                self._linear(h, self.heads * self.m.v_head_dim, module=PROJ))

    # ------------------------------------------------------------------ backward
    @cached_property
    def projection_dgrad(self) -> tuple[Kernel, ...]:
        h = self.spec.hidden
        return (*self._cast(self.n * h, module=PROJ),
                self._gemm(self.n, self.heads * self.m.v_head_dim, h, module=PROJ),
                *self._attention_casts(backward=True))

    @cached_property
    def qkv_dgrad(self) -> tuple[Kernel, ...]:
        """The up projections' data gradients (their latents' gradients)."""
        m, n, q = self.m, self.n, self.heads * self.head_qk
        qm = self.q_module
        return (*self._cast(n * (q + self.kv_up), module=qm),
                self._gemm(n, self.q_in, q, module=qm),
                self._gemm(n, m.kv_lora_rank, self.kv_up, module=KV_UP),
                Elementwise(3.0 * n * (m.q_lora_rank + m.kv_lora_rank) * ACT,
                            name="latent_layernorm_backward"))

    @cached_property
    def attention_wgrad(self) -> tuple[Kernel, ...]:
        m, n, h = self.m, self.n, self.spec.hidden
        return (self._gemm(self.heads * m.v_head_dim, h, n, module=PROJ),
                self._gemm(self.heads * self.head_qk, self.q_in, n, module=self.q_module),
                self._gemm(self.kv_up, m.kv_lora_rank, n, module=KV_UP))

    @cached_property
    def down_dgrad(self) -> tuple[Kernel, ...]:
        """The down projections' data gradients, on the shard."""
        m, h, n = self.m, self.spec.hidden, self.n_sp
        kv = m.kv_lora_rank + m.qk_pos_emb_head_dim
        q = (self._gemm(n, h, m.q_lora_rank, module=Q_DOWN),) if m.q_lora_rank else ()
        return (*self._cast(n * (m.q_lora_rank + kv), module=KV_DOWN), *q,
                self._gemm(n, h, kv, module=KV_DOWN))

    @cached_property
    def down_wgrad(self) -> tuple[Kernel, ...]:
        m, h, n = self.m, self.spec.hidden, self.n_sp
        q = (self._gemm(m.q_lora_rank, h, n, module=Q_DOWN),) if m.q_lora_rank else ()
        return (*q, self._gemm(m.kv_lora_rank + m.qk_pos_emb_head_dim, h, n, module=KV_DOWN))

    # ------------------------------------------------------------------ sizes
    @property
    def attention_parameters(self) -> int:
        m, h = self.m, self.spec.hidden
        down = h * (m.q_lora_rank + m.kv_lora_rank + m.qk_pos_emb_head_dim)   # duplicated
        norms = m.q_lora_rank + m.kv_lora_rank
        up = self.q_in * self.heads * self.head_qk + m.kv_lora_rank * self.kv_up
        return down + norms + up + self.heads * m.v_head_dim * h

    @property
    def attention_activations(self) -> int:
        """Bytes a layer's attention keeps per micro-batch for its backward: the latents
        (the rank's shard: its backward gathers them again), queries, keys and values, and
        the attention's output."""
        width = self.heads * self.head_qk + self.kv_up + self.heads * self.m.v_head_dim
        return ACT * (self.n * width + self.n_sp * self.latent)

    @property
    def kv_bytes(self) -> int:
        return self.n * self.kv_up * ACT
