"""FLOP counts of one training iteration of a transformer, by the conventions publications use.

A published "TFLOP/s per GPU" is a FLOP count divided by the measured time, and the
conventions differ (whether the recomputed forward pass counts, whether the causal mask halves
attention, whether embeddings count). To compare a prediction with a publication, count the
FLOPs the way that publication did; :data:`CONVENTIONS` names them.

``megatron`` (the default, and what ``flowsim run`` reports as ``model_flops``)
    Megatron-LM's ``num_floating_point_operations`` (``megatron/training/training.py``, r0.8,
    July 2024): ``12 B s L h^2 [(1 + g/a + s/h) q/h + (f/h) k_e m_g + V / (2 L h)]`` with ``g``
    key/value heads of ``a``, ``q`` the query projection width, ``k_e`` experts per token
    (1 for a dense model), ``m_g = 3/2`` for a gated (SwiGLU) MLP, ``V`` the vocabulary (and,
    from r0.10, ``(f_s/h) m_g`` in the brackets for shared experts of width ``f_s``; with
    ``D`` multi-token prediction depths, as later releases count them, ``L + D`` layers,
    ``V (1 + D)`` in the logits' term and ``D (h^2 + 3h/2) / (L + D) h^2`` for their projections
    and norms): every
    GEMM three times (forward, data and weight gradients), attention over the whole score
    matrix, the logits layer, no recomputation.
``megatron_causal``
    The same as Megatron-LM counts from core_r0.12 (April 2025) on: the score matmuls over
    half the matrix, the causal mask's (``s / 2h`` for ``s / h`` above, and the halves of
    latent attention's core terms). Megatron-Bridge's and Megatron-LM's logged TFLOP/s of
    2025-26 are this count: DeepSeek-V3 with one depth (sequence 4,096) is 260.0 GFLOP per
    token, as Megatron-Bridge's 26.04 table divides out (1,090 TFLOP/s at 4,193 tokens/s),
    against 291.2 in ``megatron``.
``narayanan_eq3``
    Narayanan et al., SC'21, eq. (3): ``96 B s L h^2 (1 + s / 6h + V / 16 L h)``, which counts
    the extra forward pass of full activation recomputation (a "hardware FLOPs" figure).
``palm``
    Chowdhery et al. (PaLM, 2022), appendix B, the MFU convention of the Llama 3 paper:
    ``(6 N + 12 L h s) B s`` with ``N`` the parameter count.

With frozen base weights (``frozen``: LoRA fine-tuning) ``megatron`` counts what still
runs: each weight's GEMM twice (forward and data gradient, no weight gradient), the
attention's score matmuls three times as before (their backward is all data gradients).

A hybrid model (``pattern``: a layer per character, :mod:`.generators.transformer_hybrid`)
counts in ``megatron`` as Megatron-LM's ``hybrid_flops`` does (``training.py``, main of
2026-11): per token and forward, ``4 h p (h + h g/a) + 2 s h p`` per attention layer (``p =
d a / h``: the causal mask's half, unlike the transformer's count), ``4 f h m_g`` per MLP,
``4 h (f_e k_e + f_s) m_g`` per mixture of experts, ``2 h (2 d + 2 G N + H) + 7 d N + 2 d
h`` per Mamba-2 mixer with ``d = 2 h`` (whatever its heads' width: Megatron-LM's
convention), ``G`` groups, state ``N`` and ``H`` heads, and ``2 h V`` for the logits; all
three times; with a LatentMoE of width ``l``, ``4 (l f_e k_e m_g + h l + h f_s m_g)`` per
mixture of experts; multi-token prediction depths add their layers and the logits again.
``palm`` counts a hybrid model's parameters and its attention layers alone;
``narayanan_eq3`` knows no hybrid layers and counts each as a transformer's.

Multi-token prediction depths count in ``megatron`` as Megatron-LM counts them; ``palm``
counts their parameters and layers (not their second pass through the shared output layer),
``narayanan_eq3`` ignores them, as neither convention knows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The numbers the FLOP conventions need.

    Attributes
    ----------
    layers, hidden, ffn, heads, kv_heads : int
    head_dim : int
        Width of one attention head (``hidden / heads`` usually).
    vocab : int
        Vocabulary (0: no embedding or logits layer).
    sequence : int
        Tokens per sequence.
    global_batch : int
        Sequences per iteration.
    gated_mlp : bool
        SwiGLU-style MLP (three weight matrices instead of two).
    experts, top_k : int
        Mixture of experts: experts per MoE layer (0: dense) and experts per token.
    shared_ffn : int
        Inner width of the shared experts (0: none), which every token passes.
    dense_layers, dense_ffn : int
        Layers of a mixture of experts whose MLP is dense instead, and its inner width.
    mtp_layers : int
        Multi-token prediction depths, each a layer of the last layer's kind with a
        ``2h x h`` projection, three norms and logits of its own.
    mtp_dense : bool
        The last layer (so each depth's) has a dense MLP in a mixture of experts.
    mla : tuple of int, optional
        Multi-head latent attention's ``(q_lora_rank, kv_lora_rank, qk_head_dim,
        qk_pos_emb_head_dim, v_head_dim)`` (None: standard attention).
    frozen : bool
        Every weight frozen (LoRA fine-tuning: no weight gradient; ``megatron`` only).
    pattern : str
        A hybrid model's layers (``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` experts);
        "": a transformer.
    mtp_repeated : bool
        The depths share one layer's weights (``parameters`` counts them once).
    mtp_pattern : str
        A hybrid model's multi-token prediction depth's layers (``*E``), ``mtp_layers`` times.
    moe_latent : int
        LatentMoE's width: the routed experts work on it, between a projection down from
        the hidden size and one back up (0: none).
    mamba : tuple of int, optional
        The Mamba-2 mixers' ``(heads, head_dim, state, groups, conv)`` (0 heads: ``2 h /
        head_dim``).
    tied_embeddings : bool
        The logits layer reuses the embedding's weights (GPT); ``False``: a separate output
        matrix (Llama).
    """

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    sequence: int
    global_batch: int
    gated_mlp: bool = False
    experts: int = 0
    top_k: int = 1
    tied_embeddings: bool = True
    shared_ffn: int = 0
    dense_layers: int = 0
    dense_ffn: int = 0
    mtp_layers: int = 0
    mtp_dense: bool = False
    mla: tuple[int, int, int, int, int] | None = None
    frozen: bool = False
    mtp_repeated: bool = False
    pattern: str = ""
    mtp_pattern: str = ""
    mamba: tuple[int, int, int, int, int] | None = None
    moe_latent: int = 0

    @property
    def all_layers(self) -> int:
        """The transformer layers, the multi-token prediction depths' included."""
        return self.layers + self.mtp_layers

    @property
    def all_dense_layers(self) -> int:
        """The dense layers of a mixture of experts, the depths' included."""
        return self.dense_layers + (self.mtp_layers if self.mtp_dense else 0)

    @property
    def parameters(self) -> float:
        """Weights of the model: attention, MLP or experts, norms, the embedding and, when not
        tied to it, the output matrix."""
        h, q = self.hidden, self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = h * (q + 2 * kv) + q * h
        if self.mla is not None:
            ql, kl, qk, r, v = self.mla
            a = self.heads
            attention = (h * ql + ql + (ql or h) * a * (qk + r) + h * (kl + r) + kl
                         + kl * a * (qk + v) + a * v * h)
        latent = self.moe_latent if self.experts else 0
        mlp = (3 if self.gated_mlp else 2) * (latent or h) * self.ffn
        if self.experts:
            mlp = mlp * self.experts + h * self.experts   # experts and the router
            mlp += 2 * h * latent   # LatentMoE's projections
            mlp += (3 if self.gated_mlp else 2) * h * self.shared_ffn
        embeddings = self.vocab * h * (1 if self.tied_embeddings else 2)
        # the depths' projections and norms (one depth's when the depths share one layer)
        depths = min(1, self.mtp_layers) if self.mtp_repeated else self.mtp_layers
        embeddings += depths * (2 * h * h + 3 * h)
        layers = self.layers + depths
        dense_layers = self.dense_layers + (depths if self.mtp_dense else 0)
        if self.pattern:   # a hybrid model: each layer one block and its norm
            mamba = 0
            if self.mamba is not None:
                heads, head_dim, state, groups, conv = self.mamba
                heads = heads or 2 * h // head_dim
                d, bc = heads * head_dim, 2 * groups * state
                mamba = h * (2 * d + bc + heads) + d * h + (d + bc) * (conv + 1) + 3 * heads + d
            dense = (3 if self.gated_mlp else 2) * h * self.dense_ffn
            blocks = {"M": mamba, "*": attention, "-": dense, "E": mlp}
            return sum(blocks[c] + h for c in self.pattern + self.mtp_pattern * depths) + \
                embeddings
        if dense_layers:
            dense = (3 if self.gated_mlp else 2) * h * self.dense_ffn
            return (layers * (attention + 2 * h) + (layers - dense_layers) * mlp
                    + dense_layers * dense + embeddings)
        return layers * (attention + mlp + 2 * h) + embeddings


def megatron(shape: ModelShape) -> float:
    """Megatron-LM's model FLOPs of one iteration (see the module docstring)."""
    return _megatron(shape, causal=False)


def megatron_causal(shape: ModelShape) -> float:
    """Megatron-LM's model FLOPs of one iteration as it counts them from core_r0.12: the
    score matmuls over half the matrix (see the module docstring)."""
    return _megatron(shape, causal=True)


def _megatron(shape: ModelShape, causal: bool) -> float:
    if shape.pattern:
        return _hybrid(shape)
    h = shape.hidden
    q = shape.heads * shape.head_dim
    experts = shape.top_k if shape.experts else 1
    gated = 1.5 if shape.gated_mlp else 1.0
    latent = shape.moe_latent / h if shape.experts and shape.moe_latent else 0.0
    mlp = shape.ffn / h * experts * gated * (latent or 1.0) + latent + \
        shape.shared_ffn / h * gated
    layers = shape.all_layers   # the depths' layers counted as layers (as from core 0.14)
    if shape.all_dense_layers:   # later releases count dense and MoE layers apart
        moe = (layers - shape.all_dense_layers) / layers
        mlp = moe * mlp + (1 - moe) * shape.dense_ffn / h * gated
    half = 0.5 if causal else 1.0   # the score matmuls over half the matrix, or all of it
    scores = half * shape.sequence / h * q / h
    attention = (1 + shape.kv_heads / shape.heads) * q / h + scores
    if shape.mla is not None:   # Megatron-LM's MLA terms, the scores counted as above
        ql, kl, qk, r, v = shape.mla
        a = shape.heads
        projections = ((ql * (h + a * (qk + r) + 1) if ql else h * a * (qk + r))
                       + kl * (h + a * (qk + v) + 1) + h * r + a * v * h)
        scores = half * shape.sequence * a * (qk + r + v) / (2 * h * h)
        attention = projections / (2 * h * h) + scores
    depths = shape.mtp_layers
    per = (attention
           + mlp
           + shape.vocab * (1 + depths) / (2 * layers * h)   # the logits, each depth's too
           + depths * (h + 1.5) / (layers * h))   # the depths' projections and norms
    if shape.frozen:   # no weight gradients: the weights' GEMMs two of three times
        per = (per - scores) * 2 / 3 + scores
    return 12.0 * shape.global_batch * shape.sequence * layers * h * h * per


def _hybrid(shape: ModelShape) -> float:
    """Megatron-LM's ``hybrid_flops`` (see the module docstring)."""
    h, s = shape.hidden, shape.sequence
    layers = shape.pattern + shape.mtp_pattern * shape.mtp_layers   # the depths' layers too
    count = layers.count
    gated = 1.5 if shape.gated_mlp else 1.0
    p = shape.heads * shape.head_dim / h
    attention = 4 * h * p * (h + h * shape.kv_heads / shape.heads) + 2 * s * h * p
    mlp = 4 * shape.dense_ffn * h * gated
    latent = shape.moe_latent
    moe = 4 * ((latent or h) * shape.ffn * shape.top_k + h * shape.shared_ffn) * gated + \
        4 * h * latent
    mamba = 0.0
    if shape.mamba is not None:
        heads, head_dim, state, groups, _ = shape.mamba
        d = 2 * h
        mamba = (2 * h * (2 * d + 2 * groups * state + (heads or d // head_dim))
                 + 7 * d * state + 2 * d * h)
    per_token = (count("*") * attention + count("-") * mlp + count("E") * moe
                 + count("M") * mamba + 2 * h * shape.vocab * (1 + shape.mtp_layers))
    return 3.0 * shape.global_batch * s * per_token


def narayanan_eq3(shape: ModelShape) -> float:
    """Narayanan et al.'s eq. (3): model FLOPs plus the recomputed forward pass."""
    h, s, L = shape.hidden, shape.sequence, shape.layers
    return 96.0 * shape.global_batch * s * L * h * h * (1 + s / (6 * h) + shape.vocab /
                                                         (16 * L * h))


def palm(shape: ModelShape) -> float:
    """PaLM's model FLOPs: ``6 N`` per token plus attention (``12 L h s`` per token)."""
    tokens = shape.global_batch * shape.sequence
    layers = shape.pattern.count("*") if shape.pattern else shape.all_layers
    attention = 12.0 * layers * shape.heads * shape.head_dim * shape.sequence
    if shape.mla is not None:   # query and key heads, value heads: their mean width
        _, _, qk, r, v = shape.mla
        attention = 6.0 * layers * shape.heads * (qk + r + v) * shape.sequence
    return (6.0 * shape.parameters + attention) * tokens


CONVENTIONS: dict[str, Callable[[ModelShape], float]] = {
    "megatron": megatron, "megatron_causal": megatron_causal, "narayanan_eq3": narayanan_eq3,
    "palm": palm}
