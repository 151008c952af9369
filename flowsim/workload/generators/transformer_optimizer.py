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
* ``muon`` with ``distributed_optimizer``: the layer-wise distributed optimizer on its
  parameter layout (Megatron-LM's ``--optimizer muon --use-distributed-optimizer`` since
  2026), each data-parallel rank owning whole matrices packed by their Newton-Schulz cost
  (:func:`packed`), the dense ones over the data-parallel ranks and the experts' over the
  expert-data-parallel ones, the other parameters sharded by element; its gradients
  reduce-scattered and its parameters gathered as ZeRO-1's;
* ``dist_muon``: the layer-wise optimizer's first path, which Megatron-Bridge's Muon recipes
  take (``ddp.use_distributed_optimizer`` False): every parameter dealt whole, to and fro by
  size (:func:`ping_pong`), the gradients all-reduced, the updated 16-bit weights
  all-gathered once after the step, not overlapped.

Either way the step lasts as long as the rank with the most Newton-Schulz work.

Memory per updated parameter: Adam's FP32 master weight and two moments, 12 bytes; Muon's
master weight and momentum, 8. Memory traffic of the step: :data:`OPTIMIZER_BYTES_PER_PARAM`
for either (Muon's momentum in place of two moments, and the casts around the products).
"""

from __future__ import annotations

from typing import NamedTuple

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


class Param(NamedTuple):
    """One parameter tensor of a rank: its elements, the matrices Muon orthogonalizes in it
    (``(rows, columns)``; none: Adam updates it), and whether it is an expert's."""

    numel: int
    matrices: tuple[tuple[int, int], ...] = ()
    expert: bool = False


def _matrix(rows: int, cols: int, expert: bool = False) -> Param:
    return Param(rows * cols, ((rows, cols),), expert)


def layer_parameters(spec: TransformerSpec, k, layer: int) -> list[Param]:
    """The parameters of ``layer`` (a prediction depth's for ``layer >= layers``) on one
    tensor-parallel rank, in Megatron-Core's order. ``k``: the layer's kernels
    (:meth:`LayerKernels.of_layer`)."""
    h, gated = spec.hidden, 2 if spec.gated_mlp else 1
    out: list[Param] = []
    if layer >= spec.layers:   # a depth's three norms and projection; the first depth's own
        out = [Param(h), Param(h), Param(h), _matrix(h // spec.tp, 2 * h)]   # embedding
        if layer == spec.layers and not spec.tied_embeddings and not spec.ends_on_one_rank:
            out.append(Param(k.vocab_parameters))   # where its rank holds none
    out.append(Param(h))   # the input norm
    if isinstance(k, LatentKernels):
        m = k.m
        if m.q_lora_rank:
            out += [_matrix(m.q_lora_rank, h), Param(m.q_lora_rank),
                    _matrix(k.heads * k.head_qk, m.q_lora_rank)]
        else:
            out.append(_matrix(k.heads * k.head_qk, h))
        out += [_matrix(m.kv_lora_rank + m.qk_pos_emb_head_dim, h), Param(m.kv_lora_rank),
                _matrix(k.kv_up, m.kv_lora_rank)]
        out.append(_matrix(h, k.heads * m.v_head_dim))
    else:   # one fused QKV weight, its queries, keys and values orthogonalized apart
        out += [Param((k.q + 2 * k.kv) * h, ((k.q, h), (k.kv, h), (k.kv, h))),
                _matrix(h, k.q)]
    out.append(Param(h))   # the MLP's norm
    if spec.experts and spec.is_moe(layer):
        out.append(_matrix(spec.experts, h))   # the router
        if spec.moe_latent:
            out += [_matrix(spec.moe_latent, h), _matrix(h, spec.moe_latent)]
        width, dim = k.expert_width, k.expert_dim
        for _ in range(spec.experts // spec.ep):   # each expert's weights apart
            out += [_matrix(gated * width, dim, True), _matrix(dim, width, True)]
        if spec.shared_ffn:
            shared = spec.shared_ffn // spec.tp
            out += [_matrix(gated * shared, h), _matrix(h, shared)]
    else:
        out += [_matrix(gated * k.f, h), _matrix(h, k.f)]
    return out


def stage_parameters(program) -> list[Param]:
    """Every parameter of ``program``'s rank (a
    :class:`~.transformer_program.StageProgram`), in model order."""
    spec, k = program.spec, program.k
    out: list[Param] = []
    for chunk in range(spec.vpp):
        vs = virtual_stage(spec, program.ctx.stage, chunk)
        if vs == 0 and spec.vocab:
            out.append(Param(k.vocab_parameters))
        for layer in program.chunk_units(chunk):
            if not (spec.mtp_repeated and layer > spec.layers):   # else the first depth's
                out += layer_parameters(spec, k.of_layer(layer), layer)
        if vs == program.last_vs:
            out.append(Param(spec.hidden))   # the final norm
            if spec.vocab and not spec.one_tied_weight:
                out.append(Param(k.vocab_parameters))
    return out


def _work(param: Param) -> int:
    """Megatron-Core's proxy of a parameter's Newton-Schulz cost: ``max(m, n) min(m, n)^2``."""
    return sum(min(r, c) ** 2 * max(r, c) for r, c in param.matrices)


def ping_pong(params: list[Param], ranks: int, expert_ranks: int) -> list[list[Param]]:
    """Whole parameters dealt to ranks as Megatron-Core's layer-wise optimizer deals them
    without a parameter layout (``_shard_params_ping_pong``): all of them sorted by size,
    each dealt to the next of 0, 1, ..., n - 1, n - 1, ..., 0 and again, the experts' over the
    expert-data-parallel ranks and the others over the data-parallel ones, each with its own
    turn. The ranks' shares, the data-parallel ranks' first."""
    dense: list[list[Param]] = [[] for _ in range(ranks)]
    experts: list[list[Param]] = [[] for _ in range(expert_ranks)]
    turns = {False: 0, True: 0}
    for param in sorted(params, key=lambda p: p.numel):
        owners, n = (experts, expert_ranks) if param.expert else (dense, ranks)
        turn = turns[param.expert] % (2 * n)
        owners[turn if turn < n else 2 * n - 1 - turn].append(param)
        turns[param.expert] += 1
    return dense + experts


def packed(params: list[Param], ranks: int, expert_ranks: int) -> list[list[Param]]:
    """Muon's parameters packed onto ranks by their Newton-Schulz cost, the largest first
    onto the least loaded (Megatron-Core's parameter layout for the layer-wise optimizer);
    the others are sharded as the distributed optimizer shards them, by element."""
    out = []
    for expert, n in ((False, ranks), (True, expert_ranks)):
        owned: list[list[Param]] = [[] for _ in range(n)]
        load = [0] * n
        for param in sorted((p for p in params if p.matrices and p.expert == expert),
                            key=_work, reverse=True):
            i = load.index(min(load))
            owned[i].append(param)
            load[i] += _work(param)
        out += owned
    return out


def _busiest(shares: list[list[Param]], ranks: int, cost) -> list[Param]:
    """What one GPU holds: the data-parallel rank's share of the largest ``cost`` and the
    expert-data-parallel rank's (both on one GPU: a bound, exact when either group is one
    rank)."""
    return [*max(shares[:ranks], key=lambda s: sum(map(cost, s))),
            *max(shares[ranks:], key=lambda s: sum(map(cost, s)))]


def muon_share(program, cost=_work) -> list[Param]:
    """The parameters ``program``'s rank updates under Muon: all of its stage's, or with the
    layer-wise optimizer the share of the rank with the most ``cost`` (Newton-Schulz work:
    the rank the others wait for)."""
    spec, ctx = program.spec, program.ctx
    params = stage_parameters(program)
    if not spec.sharded_optimizer:
        return params
    deal = ping_pong if spec.optimizer == "dist_muon" else packed
    return _busiest(deal(params, ctx.dp_size, ctx.expert_dp_size), ctx.dp_size, cost)


def _state(param: Param) -> int:
    return (MUON_STATE if param.matrices else ADAM_STATE) * param.numel


def newton_schulz(rows: int, cols: int) -> tuple[Kernel, ...]:
    """One matrix's Muon update: :data:`NS_STEPS` steps of three 16-bit products (``X X^T``,
    ``b A + c A A``, ``a X + B X``, each a ``torch.addmm``), and :data:`UPDATE_KERNELS`
    elementwise kernels around them, whose bytes the step's memory-bound part counts."""
    r, c = sorted((rows, cols))
    step = (Gemm(r, r, c), Gemm(r, r, r), Gemm(r, c, r))
    return step * NS_STEPS + (Elementwise(0.0, name="muon_update"),) * UPDATE_KERNELS


def optimizer_step(program) -> tuple[Kernel, ...]:
    """The step of ``program``'s rank (a :class:`~.transformer_program.StageProgram`):
    memory-bound over its local parameters, and Muon's products on the weights it
    orthogonalizes."""
    step = (Elementwise(float(OPTIMIZER_BYTES_PER_PARAM * program.local_parameters()),
                        name="optimizer"),)
    if program.spec.optimizer == "adam":
        return step
    return step + tuple(k for p in muon_share(program) for r, c in p.matrices
                        for k in newton_schulz(r, c))


def state_bytes(program) -> float:
    """Bytes of optimizer state on ``program``'s rank: Adam's for its local parameters; under
    Muon, Muon's for the matrices and Adam's for the rest, on the rank holding the most with
    the layer-wise optimizer (whose parameter layout shards the Adam-updated ones by
    element instead)."""
    spec = program.spec
    if spec.optimizer == "adam":
        return ADAM_STATE * program.local_parameters()
    if spec.optimizer == "muon" and spec.distributed_optimizer:
        adam = sum(p.numel for p in stage_parameters(program) if not p.matrices)
        return ADAM_STATE * adam / program.ctx.dp_size + sum(map(_state, muon_share(
            program, _state)))
    return sum(map(_state, muon_share(program, _state)))
