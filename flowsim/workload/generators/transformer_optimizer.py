"""The optimizer step of one rank: Adam's, memory-bound, or Muon's, whose Newton-Schulz
orthogonalization is matrix products (``optimizer: muon`` or ``dist_muon``).

Muon (Jordan et al., 2024; Megatron-Core's ``--optimizer muon``, ``megatron/core/optimizer/
emerging_optimizers.py``, on NVIDIA's Emerging-Optimizers, whose ``newton_schulz`` v0.2.0 the
Megatron-Bridge 26.06 runs pin) updates every 2-D weight of the transformer layers (the
attention's or latent attention's projections, a fused QKV weight's queries, keys and values
each apart, the MLP's, each expert's, the router's, LatentMoE's projections, a prediction
depth's) by its momentum orthogonalized with :data:`NS_STEPS` Newton-Schulz steps; the
embedding, the output layer and the norms take Adam. A step on an ``r x c`` matrix (``r <=
c``) multiplies ``A = X X^T``, ``A A`` and ``(b A + c A^2) X``: ``4 r^2 c + 2 r^3`` FLOPs, in
BF16 (``fp32_matmul_prec`` "medium"), each tensor-parallel rank on its own shard
(``tp_mode`` "blockwise", Megatron-Bridge's), one matrix after another: each product a GEMM
kernel of its own, priced as one.

Who orthogonalizes what:

* ``muon`` without ``distributed_optimizer``: every data-parallel rank every weight of its
  stage, its gradients all-reduced (Megatron-Core's plain Muon);
* ``muon`` with ``distributed_optimizer``: the layer-wise distributed optimizer, each
  data-parallel rank owning whole weights, the dense ones dealt over the data-parallel
  ranks and the experts' over the expert-data-parallel ones (:func:`dealt`: the step lasts as
  long as the rank with the most work), its gradients reduce-scattered and its
  parameters gathered as ZeRO-1's (Megatron-LM's ``--optimizer muon
  --use-distributed-optimizer``, the parameter layout of Megatron-LM since 2026);
* ``dist_muon``: the same ownership on its first path, which Megatron-Bridge's Muon recipes
  take (``ddp.use_distributed_optimizer`` False): the gradients all-reduced, the updated 16-bit
  weights all-gathered once after the step, not overlapped.

Memory per updated parameter: Adam's FP32 master weight and two moments, 12 bytes; Muon's
master weight and momentum, 8. Memory traffic of the step: :data:`OPTIMIZER_BYTES_PER_PARAM`
for either (Muon's momentum in place of two moments, and the casts around the products).
"""

from __future__ import annotations

from ..kernels import Elementwise, Gemm, Kernel
from .transformer_mla import LatentKernels
from .transformer_schedule import virtual_stage
from .transformer_spec import TransformerSpec

#: Adam with FP32 master weights: bytes moved per parameter by the optimizer step (read the FP32
#: gradient, read and write master weight and both moments, write the 16-bit weight)
OPTIMIZER_BYTES_PER_PARAM = 30
#: Newton-Schulz steps of one Muon update (Megatron-Core's ``muon_num_ns_steps`` default, the
#: five "quintic" coefficient triples each once)
NS_STEPS = 5
#: elementwise kernels of one matrix's Muon update besides its products (Emerging-Optimizers'
#: step: weight decay, momentum, Nesterov, the casts to and from 16 bits, the norm and the
#: division by it, the scaling, the update, the 16-bit copy of the master weight)
UPDATE_KERNELS = 10
#: bytes of optimizer state per parameter: Adam's, Muon's
ADAM_STATE, MUON_STATE = 12, 8


def weight_matrices(spec: TransformerSpec, k, layer: int) -> tuple[list[tuple[int, int, int]],
                                                                   list[tuple[int, int, int]]]:
    """The 2-D weights Muon updates in ``layer`` (a prediction depth's for ``layer >=
    layers``) on one tensor-parallel rank, as ``(rows, columns, count)``: the dense ones and
    the experts'. ``k``: the layer's kernels (:meth:`LayerKernels.of_layer`)."""
    h, gated = spec.hidden, 2 if spec.gated_mlp else 1
    if isinstance(k, LatentKernels):
        m = k.m
        queries = [(m.q_lora_rank, h, 1), (k.heads * k.head_qk, m.q_lora_rank, 1)] \
            if m.q_lora_rank else [(k.heads * k.head_qk, h, 1)]
        dense = [*queries, (m.kv_lora_rank + m.qk_pos_emb_head_dim, h, 1),
                 (k.kv_up, m.kv_lora_rank, 1), (h, k.heads * m.v_head_dim, 1)]
    else:   # queries, keys and values apart (muon_split_qkv), and the output projection
        dense = [(k.q, h, 1), (k.kv, h, 2), (h, k.q, 1)]
    experts: list[tuple[int, int, int]] = []
    if spec.experts and spec.is_moe(layer):
        dense.append((spec.experts, h, 1))   # the router
        local, width, dim = spec.experts // spec.ep, k.expert_width, k.expert_dim
        experts = [(gated * width, dim, local), (dim, width, local)]
        if spec.moe_latent:
            dense += [(spec.moe_latent, h, 1), (h, spec.moe_latent, 1)]
        if spec.shared_ffn:
            shared = spec.shared_ffn // spec.tp
            dense += [(gated * shared, h, 1), (h, shared, 1)]
    else:
        dense += [(gated * k.f, h, 1), (h, k.f, 1)]
    if layer >= spec.layers:   # the depth's projection of [embedding, hidden state]
        dense.append((h // spec.tp, 2 * h, 1))
    return dense, experts


def newton_schulz(rows: int, cols: int) -> tuple[Kernel, ...]:
    """One matrix's Muon update: :data:`NS_STEPS` steps of three 16-bit products (``X X^T``,
    ``b A + c A A``, ``a X + B X``, each a ``torch.addmm``), and :data:`UPDATE_KERNELS`
    elementwise kernels around them, whose bytes the step's memory-bound part counts."""
    r, c = sorted((rows, cols))
    step = (Gemm(r, r, c), Gemm(r, r, r), Gemm(r, c, r))
    return step * NS_STEPS + (Elementwise(0.0, name="muon_update"),) * UPDATE_KERNELS


def dealt(matrices: list[tuple[int, int, int]], ranks: int) -> list[tuple[int, int]]:
    """The matrices of the rank dealt the most Newton-Schulz work when ``ranks`` ranks each
    own whole ones: sorted by size, dealt 0, 1, ..., ranks - 1, ranks - 1, ..., 0 and again
    (Megatron-Core's ``LayerWiseDistributedOptimizer``); the rank the others wait for."""
    whole = sorted(((r, c) for r, c, n in matrices for _ in range(n)), key=lambda m: -m[0] * m[1])
    owned: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
    for i, matrix in enumerate(whole):
        turn, place = divmod(i, ranks)
        owned[place if turn % 2 == 0 else ranks - 1 - place].append(matrix)
    work = [sum(min(r, c) ** 2 * max(r, c) for r, c in mine) for mine in owned]
    return owned[work.index(max(work))]


def optimizer_step(program) -> tuple[Kernel, ...]:
    """The step of ``program``'s rank (a :class:`~.transformer_program.StageProgram`):
    memory-bound over its local parameters, and Muon's products on the weights it
    orthogonalizes."""
    spec = program.spec
    step = (Elementwise(float(OPTIMIZER_BYTES_PER_PARAM * program.local_parameters()),
                        name="optimizer"),)
    if spec.optimizer == "adam":
        return step
    dense: list[tuple[int, int, int]] = []
    experts: list[tuple[int, int, int]] = []
    for chunk in range(spec.vpp):
        for layer in program.chunk_units(chunk):
            if spec.mtp_repeated and layer > spec.layers:   # the first depth's, again
                continue
            d, e = weight_matrices(spec, program.k.of_layer(layer), layer)
            dense, experts = dense + d, experts + e
    ctx, sharded = program.ctx, spec.sharded_optimizer
    mine = [*dealt(dense, ctx.dp_size if sharded else 1),
            *dealt(experts, ctx.expert_dp_size if sharded else 1)]
    return step + tuple(k for rows, cols in mine for k in newton_schulz(rows, cols))


def state_bytes(program) -> float:
    """Bytes of optimizer state on ``program``'s rank: Adam's for its local parameters, with
    Muon 4 fewer for each layer weight among them (the vocabulary's keep Adam's)."""
    spec, local = program.spec, program.local_parameters()
    if spec.optimizer == "adam":
        return ADAM_STATE * local
    vocab = 0.0
    if spec.vocab:   # the embedding's and output layer's copies on this rank
        for chunk in range(spec.vpp):
            vs = virtual_stage(spec, program.ctx.stage, chunk)
            copies = (vs == 0) + (vs == program.last_vs) - spec.one_tied_weight
            vocab += program.k.vocab_parameters * copies
    if spec.sharded_optimizer:
        vocab /= program.ctx.dp_size
    return ADAM_STATE * vocab + MUON_STATE * (local - vocab)
