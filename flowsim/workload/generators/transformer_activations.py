"""What one transformer layer keeps for its backward pass per micro-batch on one GPU, term
by term (:mod:`.transformer_memory` sums it over a stage's schedule).

Activations per layer and micro-batch follow Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023), section 4.1, term by term, for any
MLP width and query-group count: with ``n`` tokens of a rank (``micro_batch sequence /
cp``) and 16-bit tensors, the attention block keeps its input, Q, K and V, and the output
(the projection's input), the MLP its input, the activation's input and FC2's input, two
layer-norm inputs and two dropout masks (one byte each): ``34 n h`` for GPT's shapes. Tensor
parallelism splits everything between its collectives; sequence parallelism also the norms,
dropouts and block inputs (else they are replicated: ``n h (10 + 24 / t)``). Unfused
attention adds the score matrix's softmax, dropout mask and dropout output (``5 a s n``;
selective recomputation drops it, and what the modules it re-runs made:
:func:`_recomputed_modules`); full recomputation keeps only each layer's input (``2 n h``,
split by sequence parallelism) and one layer's activations at a time.

In FP8 and NVFP4 a linear layer keeps for its weight gradient the column-wise copy of the
input it quantized: one byte per element, NVFP4's half and its scales, in each module's
precision (:mod:`.transformer_saved`; torchao's ``Float8Linear`` keeps the 16-bit input).
So the norms' outputs that QKV and a dense FC1 read, FC2's input and the experts' inputs are
kept in low precision; a mixture of experts' norm output, which the 16-bit router reads,
stays 16-bit, and the latent projection's first linear layer keeps its own copy of it.
Megatron-Core has the output projection and the shared experts' FC1 keep the 16-bit tensor
the attention or the router already keeps (``set_save_original_input``), except under
delayed scaling, where each keeps its own quantized copy. With ``moe_act`` recomputed the
experts' FC2 keeps the 16-bit input the recomputation discards: nothing stays. A frozen
layer (LoRA) keeps no input; an adapter keeps its 16-bit one. Latent attention's and
Mamba-2's own tensors are counted in 16 bits. With ``activation_func_fp8_input_store`` the
activation keeps its input (FC1's output) in FP8, one byte per element (Megatron-Core's
``BiasSwiGLUFunction``), but for the experts under ``moe_act`` recomputation (the checkpoint
keeps the 16-bit input) or the fused grouped MLP (its ``ScaledSwiGLU`` has no FP8 store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .transformer_hybrid import ATTENTION, MAMBA, MLP, MOE
from .transformer_mla import LatentKernels
from .transformer_saved import Saved
from .transformer_shapes import ACT, activation_input_bytes, expert_activation_input_bytes

if TYPE_CHECKING:
    from .transformer_program import StageProgram


def _extra(size: float) -> float:
    """A quantized copy's bytes beside a 16-bit tensor already counted (none in 16 bits)."""
    return 0.0 if size == ACT else size


def layer_activations(program: StageProgram, kind: bool | str, saved: Saved
                       ) -> tuple[float, float]:
    """Bytes one layer (of a :func:`_kind`, its inputs ``saved`` so) keeps per micro-batch,
    and what one layer needs on top at a time (the recomputed layer under full
    recomputation)."""
    spec, k = program.spec, program.k
    t, n, h = spec.tp, k.n, spec.hidden
    full = whole_layer(program, kind, saved) if isinstance(kind, bool) else \
        _hybrid_layer(program, kind, saved)
    moe = kind is True
    if spec.recompute == "full":   # the layer's input; every N-th layer's, on average
        kept = ACT * n * h / (t if spec.sp else 1)
        every = spec.recompute_every
        return (kept + (every - 1) * full) / every, full
    if spec.recompute == "every_other_matmul":
        if moe or isinstance(k, LatentKernels):   # every other matmul's output: about half
            kept = _split_activations(program, moe, saved) / 2 + \
                _shared_activations(program, _norm_outputs(program, moe, saved))
        else:   # the odd matmuls' outputs (wq, wv; w1, w2), the attention's, the input
            kept = ACT * n * (k.q + k.kv + k.q + k.f) + ACT * n * h * (2 / t if spec.sp else 2)
        return kept, full - kept
    dropped = _recomputed_modules(program, kind, saved)
    return full - dropped, dropped


def _recomputed_modules(program: StageProgram, kind: bool | str, saved: Saved) -> float:
    """What ``recompute_modules`` keeps out of a layer's activations (re-made before its
    backward, one layer's at a time): a mixture of experts' or a dense MLP's whole share
    (``moe``, ``mlp``), or its experts' activation outputs, FC2's inputs (``moe_act``), and
    its shared experts' (``shared_experts``); the outputs of the norms that are modules of
    their own (``layernorm``: a mixture of experts' pre-MLP norm, latent attention's input
    norm); latent attention's queries, keys and values (``mla_up_proj``)."""
    spec, k = program.spec, program.k
    modules = spec.recomputed_modules
    moe, dense = kind in (True, MOE), kind in (False, MLP)
    norm = ACT * k.n_sp * spec.hidden   # a norm's output, split by sequence parallelism
    out = 0.0
    if isinstance(k, LatentKernels) and kind in (True, False, ATTENTION):
        out += norm * ("layernorm" in modules) + \
            ACT * k.n * (k.heads * k.head_qk + k.kv_up) * ("mla_up_proj" in modules)
    if (moe and "moe" in modules) or (dense and "mlp" in modules):
        return out + _mlp_activations(program, moe, saved) + \
            norm * (moe and "layernorm" in modules)
    if not moe:
        return out
    rows = k.expert_rows * (spec.experts // spec.ep)
    return out + norm * ("layernorm" in modules) + \
        saved.experts_fc2 * rows * k.expert_width * ("moe_act" in modules) + \
        _shared_experts(program, saved) * ("shared_experts" in modules)


def _split_activations(program: StageProgram, moe: bool, saved: Saved) -> float:
    """A layer's activations between its TP collectives (split by t): attention and MLP."""
    k = program.k
    attention = k.attention_activations if isinstance(k, LatentKernels) else \
        _attention(program, saved)
    return attention + _mlp_activations(program, moe, saved)


def _attention(program: StageProgram, saved: Saved) -> float:
    """Fused attention's 16-bit queries, keys, values and output, and the projection's
    quantized copy of that output."""
    k = program.k
    return ACT * k.n * (2 * k.q + 2 * k.kv) + _extra(saved.proj) * k.n * k.q


def _mlp_activations(program: StageProgram, moe: bool, saved: Saved) -> float:
    """The MLP's share of :func:`_split_activations` (the experts' and shared experts'):
    FC1's output (the activation's input: :func:`.transformer_shapes.activation_input_bytes`)
    and FC2's input, the experts' inputs."""
    spec, k = program.spec, program.k
    if not moe:
        return k.n * k.f * (activation_input_bytes(spec) + saved.fc2)
    rows = k.expert_rows * (spec.experts // spec.ep)
    latent = spec.moe_latent   # LatentMoE's projections: the up projection's input
    return saved.experts_fc1 * k.expert_dim * rows + \
        rows * k.expert_width * (expert_activation_input_bytes(spec) + saved.experts_fc2) + \
        _shared_experts(program, saved) + saved.latent_up * k.moe_tokens * latent + \
        (_extra(saved.latent_down) * k.n_sp * spec.hidden if latent else 0.0)


def _shared_experts(program: StageProgram, saved: Saved) -> float:
    """The shared experts' share of :func:`_mlp_activations`."""
    spec, k = program.spec, program.k
    if not spec.shared_ffn:
        return 0.0
    fc1_out = activation_input_bytes(spec)
    return k.n * (spec.shared_ffn // spec.tp) * (fc1_out + saved.shared_fc2) + \
        _extra(saved.shared_fc1) * k.n_sp * spec.hidden


def _hybrid_layer(program: StageProgram, kind: str, saved: Saved) -> float:
    """Bytes a hybrid model's layer keeps per micro-batch when it is not recomputed: its
    block's (a Mamba-2 mixer's: :attr:`~.transformer_mamba.MambaKernels.activations`) and
    one norm's and residual's share of :func:`_shared_activations` (the norm's output as
    the block's first linear layer keeps it)."""
    block = float(program.k.mamba.activations) if kind == MAMBA else \
        _attention(program, saved) + _scores(program) if kind == ATTENTION else \
        _mlp_activations(program, kind == MOE, saved)
    norm = {MAMBA: saved.in_proj, ATTENTION: saved.qkv, MLP: saved.fc1}.get(kind, ACT)
    return block + _shared_activations(program, 2 * norm) / 2


def _norm_outputs(program: StageProgram, moe: bool, saved: Saved) -> float:
    """Bytes per element of a layer's two norm outputs together, as their readers keep
    them: QKV's (latent attention's norm is a module of its own: 16-bit) and a dense FC1's;
    a mixture of experts' feeds the 16-bit router."""
    latent = isinstance(program.k, LatentKernels)
    return (ACT if latent else saved.qkv) + (ACT if moe else saved.fc1)


def _shared_activations(program: StageProgram, norm_outputs: float) -> float:
    """A layer's block inputs (the norms' inputs), the norms' outputs (``norm_outputs``
    bytes per element of both) and dropout masks (split by sequence parallelism)."""
    spec = program.spec
    shared = (2 * ACT + norm_outputs + 2) * program.k.n * spec.hidden
    return shared / spec.tp if spec.sp else shared


def whole_layer(program: StageProgram, moe: bool, saved: Saved) -> float:
    """Bytes a layer keeps per micro-batch when it is not recomputed, the score matrices
    of unfused attention included where no recomputation drops them."""
    return _split_activations(program, moe, saved) + \
        _shared_activations(program, _norm_outputs(program, moe, saved)) + \
        _scores(program) + _lora_inputs(program, saved)


def _scores(program: StageProgram) -> float:
    """Unfused attention's score matrices (their softmax, dropout mask and output), where
    no recomputation drops them."""
    spec = program.spec
    dropped = spec.recompute in ("full", "every_other_matmul") or \
        "core_attn" in spec.recomputed_modules
    if spec.attention != "unfused" or (dropped and not spec.recompute_layers
                                       and spec.recompute_every == 1):
        return 0.0
    return 5.0 * (spec.heads // spec.tp) * spec.micro_batch * (spec.sequence // spec.cp) ** 2


def _lora_inputs(program: StageProgram, saved: Saved) -> float:
    """Under LoRA, what the kept inputs change by: a frozen layer keeps no input for its
    weight gradient, which is never computed (QKV's and FC1's, their norms' outputs, sharded
    with sequence parallelism, and FC2's), unless an adapter on it keeps that input for its
    own; with sequence parallelism an adapter on QKV or FC1 keeps its input whole (the
    gathered norm output it reads) where the layer kept a shard (the projection's input is
    the attention's output, kept for the attention's backward; a quantized projection keeps
    no copy of it). An adapter keeps its 16-bit input."""
    spec, k = program.spec, program.k
    if not spec.frozen:
        return 0.0
    change = -_extra(saved.proj) * k.n * k.q - saved.fc2 * k.n * k.f
    if "linear_fc2" in spec.lora_targets:   # the adapter's 16-bit input
        change += ACT * k.n * k.f
    for target, size in (("linear_qkv", saved.qkv), ("linear_fc1", saved.fc1)):
        change -= size * k.n_sp * spec.hidden   # the frozen layer's norm output
        if target in spec.lora_targets:   # the adapter's input, gathered
            change += ACT * k.n * spec.hidden
    return change
