"""One training iteration of a GPT- or Llama-style transformer under Megatron-LM's
parallelisms: tensor (+ sequence), context, expert, data and pipeline (+ interleaved).

The model: ``layers`` layers of width ``h = hidden``, attention with ``heads`` query heads of
``head_dim`` and ``kv_heads`` key/value heads (grouped-query attention when fewer; Ainslie et
al. 2023), an MLP of inner width ``ffn`` (two GEMMs and GeLU, or with ``gated_mlp`` three and
SwiGLU; Shazeer 2020; unsaid, gated when a width given is not ``4 hidden``, with a warning) or,
with ``experts``, a mixture of experts (router, ``top_k`` of
``experts`` experts of width ``moe_ffn`` per token, ``capacity_factor``, and with
``shared_ffn`` shared experts every token passes after their combine, as Megatron-Core r0.10
to r0.12 run them; ``moe_layer_freq`` makes some
layers' MLPs dense); ``mla`` gives multi-head latent attention's widths instead
(:mod:`.transformer_mla`), ``window`` a causal sliding window (the keys each query attends
back to) on every layer or, with ``window_skip_freq``, on the layers it names; with ``vocab`` an
embedding on the first virtual stage and the output layer with its cross entropy on the last
(the vocabulary padded to a multiple of ``128 t`` as Megatron-LM pads it; the cross entropy's
passes over the FP32 logits as Megatron-Core's steps make them, fewer with
``cross_entropy_fusion``, fewer still, over the 16-bit logits, with its
``cross_entropy_fusion_impl`` ``te`` (Transformer Engine's), ``flash_attn`` or ``compiled``;
``metric_cross_entropies`` more after each backward); ``mtp_layers`` multi-token prediction
depths (DeepSeek-V3's MTP
modules: each a layer of the last layer's kind with its own embedding lookup, projection and
logits, on the last stage; :mod:`.transformer_mtp`). ``hybrid_pattern`` makes a hybrid
model (Megatron-Core's ``MambaModel``, NVIDIA's Nemotron-H and Nemotron 3): one character
per layer, ``M`` a Mamba-2 mixer (Dao and Gu 2024; its widths in ``mamba``: ``heads``,
``head_dim``, ``state``, ``groups``, ``conv``, ``chunk``; :mod:`.transformer_mamba`), ``*``
attention, ``-`` a dense MLP, ``E`` a mixture of experts, each a layer with its own norm and
residual (:mod:`.transformer_hybrid`). An iteration runs
``global_batch`` sequences of ``sequence`` tokens in micro-batches of ``micro_batch``
(``global_batch / (micro_batch dp)`` micro-batches per pipeline).

Each op carries its kernels' shapes (:mod:`.transformer_kernels`), priced by a compute model
when the run is simulated: a device preset (``device``, or the network's ``cluster``
device), or a ``roofline``. Per layer and micro-batch, per rank (``n = b s / cp`` tokens,
``t = tp``): the QKV, projection, FC1 and FC2 GEMMs (Megatron's column- and row-parallel
splits), fused (flash) attention with the causal mask (Dao 2023: the fused kernel
Transformer Engine picks on the device, cuDNN's on Hopper and Blackwell, or with ``flash2``
FlashAttention-2, which H100 runs at about 60% of cuDNN's rate) or Megatron-LM's unfused
attention (batched GEMMs, softmax and dropout of the score matrix: Shoeybi et al. 2019,
Narayanan et al. 2021), layer norms, bias-dropout-residual adds, the activation and, with
``position_embedding: rope`` (Llama's, Nemotron's; Megatron-LM's default is
``learned_absolute``, added once in the embedding, and ``alibi`` lives inside the attention
kernel), the rotation of the queries and keys as memory-bound kernels; backward passes as data-
and weight-gradient GEMMs. Activation recomputation (Korthikanti et al. 2022): ``full`` re-runs
each layer's forward, with its communication, before its backward; ``selective`` re-runs the
modules ``recompute_modules`` names (Megatron-Core's ``--recompute-modules``; by default the
attention core: scores, softmax and dropout, or the fused attention's forward kernel, which
Megatron-Core's checkpoint re-runs; ``moe``, ``mlp``, ``moe_act``, ``shared_experts``,
``layernorm``, ``mla_up_proj``: :mod:`.transformer_recompute`); ``every_other_matmul`` is
torchtitan's per-op policy (a layer's even-numbered matmuls, a mixture of experts' grouped
expert GEMMs and the elementwise work between them, its input gathered again with sequence
parallelism); ``recompute_every: N`` with ``full``
re-runs every N-th layer only, ``recompute_layers: N`` the first N layers of each model chunk
(Megatron-Core's ``--recompute-method block --recompute-num-layers N``; the uniform method
re-runs every layer). Instead of recomputing, ``cpu_offload_layers: N`` copies the first N
layers' activations to host memory and back beside the compute, at the device's host-link
rate (:mod:`.transformer_offload`); ``offload_modules`` copies what the named modules save,
module by module (Megatron-Core's fine-grained activation offloading: ``attn_norm``,
``qkv_linear``, ``core_attn``, ``attn_proj``, ``mlp_norm``, ``expert_fc1``, ``moe_act``,
``fused_group_mlp``; tensors of at least ``offload_min_elements``; the compute waits only
beyond ``offload_max_inflight`` copies in flight: :mod:`.transformer_module_offload`).
``optimizer: muon`` (or ``dist_muon``) updates the layers' weights with Muon, whose
Newton-Schulz products the step prices (:mod:`.transformer_optimizer`).
``dtype: fp8`` is
Transformer Engine's FP8 training: the layers' linear GEMMs in FP8, each with a memory-bound
cast of its input forward and of its output's gradient backward; attention, the
output layer and the MoE router stay 16-bit (Megatron-LM's output layer and router are not
Transformer Engine modules). ``fp8_recipe`` says how it scales: ``delayed`` (the default) and
``tensorwise`` (current scaling) scale whole tensors and cost the same (the cast writes a
transpose on Hopper, none on Blackwell); ``mxfp8`` (``dtype: mxfp8`` for short; Blackwell
only) scales blocks of 32 elements, writes both layouts with their scales, and gathers
parameters in 16 bits (``fsdp`` with ``fp8_param_gather`` gathers them in MXFP8). Its
GEMMs are priced at FP8's rate (no block-scaled GEMM measurement is published;
``docs/accuracy/published.md`` compares it with NVIDIA's published pairs).
``nvfp4`` (``dtype: nvfp4``; Transformer Engine's ``NVFP4BlockScaling``, Megatron-LM's
``--fp4-format e2m1``; Blackwell only) runs the same GEMMs in FP4 at the device's FP4 peak
times FP8's fraction of its peak (an assumption: no FP4 GEMM measurement is published); its
casts find each tensor's amax in a pass of their own, then write both layouts in half a byte
per element with an E4M3 scale per 16; its parameters are gathered in 16 bits, or with
``fp8_param_gather`` (``--fp4-param-gather``) in NVFP4. ``bf16_layers_at_start`` and
``bf16_layers_at_end`` keep the first and last layers in 16 bits, and ``quant_recipe``
(Megatron-Core's quantization recipe, or its file) gives modules their own precision, first
matching rule first; a multi-token prediction depth's block ignores FP4, as Megatron-Core's
does (:mod:`.transformer_precision`).

Communication:

* **tensor parallel** (Shoeybi et al. 2019; with ``sp``, Korthikanti et al. 2022): around the
  attention and the MLP, an all-reduce of the ``n h`` output forward and of the input gradient
  backward; with sequence parallelism an all-gather of the ``n h / t`` shard before and a
  reduce-scatter after instead, and in backward each column-parallel layer's input gathered
  again for its weight gradient. A data gradient's collective overlaps with the weight
  gradient; ``tp_comm_overlap`` pipelines every collective of a layer with its GEMMs as
  Transformer Engine's userbuffers do (:mod:`.transformer_overlap`);
* **context parallel** (causal load balancing as Megatron-Core does: the sequence split in
  ``2 cp`` chunks, two per rank), in the three ways of ``cp_comm_type``
  (:mod:`.transformer_cp`): ``p2p`` (the default, Transformer Engine's and Megatron-Core's),
  a ring of ``cp - 1`` steps, each attending the block of keys and values the previous
  step's exchange brought while its own passes it on, backward the blocks again with their
  gradients a step behind; ``all_gather`` (Llama 3's), keys and values all-gathered (the
  local block attended meanwhile) and their gradients reduce-scattered; ``a2a``
  (DeepSpeed-Ulysses), all-to-alls that trade sequence shards for head shards around an
  attention over the whole sequence. Megatron's unfused attention all-gathers;
* **expert parallel** (Megatron-Core's all-to-all dispatcher, ``MoEAlltoAllTokenDispatcher``
  in core_r0.9.0): tokens dispatched to and combined from the experts' ranks by all-to-alls
  over the EP group (a part of the data-parallel group), forward and backward. Each expert is
  split over the TP ranks (``expert_tp = tp``, Megatron-Core's default): the received tokens
  are all-gathered over TP before the experts and their output reduce-scattered after
  (sequence parallelism is implied, as Megatron-Core requires it with MoE and TP); with
  ``expert_tp: 1`` every TP rank holds whole experts and sends its own tokens.
  ``dispatcher: deepep`` is DeepEP's dispatch instead: once per node over the scale-out
  network, then over NVLink to the ranks (:mod:`.transformer_dispatch`, with ``node_limit``,
  ``routing_groups`` and ``fp8_dispatch``).
  ``expert_layout: folded`` is Megatron-Core 0.10's MoE parallel folding: the EP ranks are
  the first ``ep`` of the CP x DP ranks (of the TP x CP x DP ranks with ``expert_tp: 1``), so
  they take the CP ranks first, or the TP ranks (and ``ep`` may exceed ``dp``); without
  either it is the same layout. ``moe_a2a_overlap`` is Megatron-Core's combined 1F1B: one
  more warm-up forward, then each forward built beside the backward after it on two chains
  of the compute stream, a layer of each at a time and joined after every pair of layers, so
  that one layer computes while the other's all-to-alls run (within a pair the engine runs
  whichever op is ready: :mod:`.transformer_combined`);
* **pipeline parallel** (Narayanan et al. 2021): one program per pipeline rank; activations
  and gradients sent between consecutive virtual stages (sequence-parallel shards, or split
  over the TP ranks and all-gathered on arrival: Megatron's scatter/gather optimisation);
  ``gpipe``, ``1f1b`` (PipeDream-Flush) or ``interleaved`` with ``vpp`` model chunks per rank
  (each chunk runs ``microbatch_group`` micro-batches in a row, ``pp`` unless given:
  Megatron-Core 0.10's ``--microbatch-group-size-per-virtual-pipeline-stage``, with which the
  micro-batches need not be a multiple of ``pp``), or ``dualpipev`` (DeepSeek's DualPipeV,
  ``vpp: 2`` in a V: rank ``r`` holds virtual stages ``r`` and ``2 pp - 1 - r``, forwards
  beside backwards, some weight gradients deferred into the bubble:
  :func:`~.transformer_schedule.dualpipev`, :mod:`.transformer_zero_bubble`);
  layers laid out ``even``-ly, ``first_last_fewer`` (Llama 3), ``uniform`` (DeepSpeed),
  ``embedding_weighted`` (torchtitan) or as an explicit list;
* **data parallel** (Megatron-Core's DDP): gradients (FP32 with BF16 or FP8 training, as
  Megatron-LM accumulates them, unless ``grad_reduce_in_bf16``; else 16-bit) reduced over the
  data- and context-parallel ranks
  in buckets of ``bucket_size`` parameters (default ``max(40 M, 1 M dp)``) as soon as a bucket
  is ready in the last micro-batch's backward (``overlap_grad_reduce``) or all after the
  backward; expert gradients over the expert-data-parallel ranks. With pipeline parallelism
  and ``align_grad_reduce`` (default true, as Megatron-LM and NeMo 1) a model chunk's buckets
  are reduced together once its last backward is done, at points aligned over the pipeline
  (without interleaving: the first stage's bucket by bucket, the others' after their last
  backward, in the pipeline's drain). With
  ``distributed_optimizer`` (ZeRO-1 as Megatron-LM does it): reduce-scatter instead of
  all-reduce, the optimizer step on the rank's shard, and an all-gather of the updated 16-bit
  parameters (the layers' in FP8 with ``fp8_param_gather``) over the same buckets: after
  the step, or (``overlap_param_gather``) as Megatron-Core overlaps them with the forward,
  one bucket at a time, each dispatched when the forward reaches the bucket before it; with
  the interleaved schedule (``align_param_gather``, default true as Megatron-LM's) a model
  chunk's gathers start together, chunks 0 and 1 with the iteration and chunk ``j`` on
  pipeline rank ``r`` ``r`` forwards before chunk ``j - 1``'s first, so that all ranks start
  them at about the same time.
  The optimizer step is a memory-bound kernel (Adam with FP32 master weights: 30 bytes per
  parameter).
* **fully sharded data parallel** (``fsdp``: ZeRO-3 as PyTorch FSDP2 runs it, torchtitan's
  data parallelism and Megatron-LM's ``--use-torch-fsdp2``): each transformer layer, the
  embedding and the output layer are units whose parameters stay sharded over the
  data-parallel ranks. A unit's parameters are all-gathered (16-bit; the layers' weights in
  FP8 with ``fp8_param_gather``) before its forward and again before its backward, one unit
  ahead of the compute (FSDP2's prefetch), and its gradients reduce-scattered after its
  backward, every micro-batch; the output layer (and a tied embedding) stays gathered from
  its forward to its backward. With pipeline parallelism every unit stays gathered, its
  gradients unsharded, from its first forward to its last backward, after which they are
  reduce-scattered once (torchtitan's pipeline stages with FSDP). Without a pipeline,
  ``fsdp_defer_grad_sync`` reduces each unit's accumulated gradients once, after the last
  micro-batch's backward, and ``fsdp_reshard`` frees the gathered parameters
  ``after_backward`` only (``reshard_after_forward=False``) or ``after_step`` (kept across
  micro-batches), as NeMo AutoModel's runs set them. The optimizer
  steps on the rank's shard. ``fsdp_shard`` (hybrid sharding, HSDP) shards over groups of
  that many data-parallel ranks (the innermost ones: inside a node where they fit), or
  ``fsdp_replicas`` makes that many groups; the replicas all-reduce their gradient shards
  after each reduce-scatter (``fsdp_outer: all_reduce``, FSDP2's), once after the last
  micro-batch's (``all_reduce_last``, Megatron-FSDP's), or reduce-scatter them then and
  gather the shard back in the step's first forward and backward, the optimizer stepping
  on ``1/dp`` (``optim``: Megatron-FSDP's ``outer_dp_sharding_strategy``). Block-scaled
  weights (``fp8_param_gather`` with MXFP8 or NVFP4) are gathered in the layout each pass
  needs, both where the forward's gather serves the backward. Megatron's bucketed
  gradient reduction and ``distributed_optimizer``'s gathers are replaced
  (``overlap_grad_reduce``, ``overlap_param_gather`` and ``bucket_size`` do nothing with
  it). ``fsdp_impl`` says what runs around the collectives: FSDP2's copies out of the
  gathered buffer and into the reduced one (``fsdp2``), FSDP1's cast and pre-divide of each
  gradient (``fsdp1``), or nothing (``megatron``: Megatron-FSDP) (:mod:`.transformer_fsdp`).

Tied embeddings (``tied_embeddings``, GPT's) are one weight when one stage holds both the
embedding and the output layer: one gradient, one optimizer shard, one parameter all-gather.
Left out: the embedding's gradient all-reduce between the first stage and the last (a tied
embedding's, or with multi-token prediction an untied one's copy there), the
vocabulary-parallel cross entropy's small all-reduces, dropout's random number generation
beyond its mask, kernel-level effects of communication on compute (NCCL's SM use).

Mapping onto the network: ranks are numbered in Megatron-Core's default order
``tp-cp-ep-dp-pp`` (tensor parallelism innermost); the network's dimensions are cut wherever a
group ends inside one (:class:`~flowsim.topology.view.LogicalView`), so any degrees whose
product is the NPU count fit any network whose dimensions they divide. Degrees that do not
divide them (tensor 2 x data 6 x pipeline 2 on three 8-GPU nodes: a data-parallel group of 4
GPUs of one node and 2 of the next) run on a
:class:`~flowsim.topology.view.StraddlingView`: every message on its real route, every group
simulated (no symmetry); the flow model routes a message that changes node and GPU index in
dimension order (GPU index first, as NCCL's PXN does), so two rings of such groups can meet on
one NIC where NCCL's topology-aware ring order would keep them apart. ``dims`` gives whole
network dims per parallelism instead.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from typing import Any

from ...errors import config_error
from ..flops import ModelShape, megatron
from ..graph import Program, Workload
from .transformer_checks import _where, micro_batches
from .transformer_mapping import StageContext, map_groups, stages
from .transformer_memory import layer_activation_bytes, stage_memory
from .transformer_parse import parse_transformer
from .transformer_program import StageProgram, layer_names
from .transformer_schedule import layer_counts, stage_schedule
from .transformer_spec import A100_ROOFLINE, KEYS, TransformerSpec


def transformer(network: Any, **values: Any) -> Workload:
    """One training iteration of a transformer (the model, the parallelisms and the mapping
    are in the module docstring).

    Parameters
    ----------
    network : Network
        A built network (``flowsim.load_network``); ``tp * cp * dp * pp`` must equal its NPUs.
    **values
        The spec's keys: ``layers`` (or ``hybrid_pattern``'s length), ``hidden``,
        ``sequence`` (required); ``hybrid_pattern`` (``M``, ``*``, ``-``, ``E`` per layer,
        ``|`` between pipeline stages)
        with ``mamba`` (``heads``, ``head_dim``, ``state``, ``groups``, ``conv``,
        ``chunk``); ``heads``,
        ``kv_heads``, ``head_dim``, ``ffn``, ``gated_mlp``, ``vocab``, ``tied_embeddings``;
        ``global_batch`` (sequences) or ``micro_batches``, ``micro_batch``; ``tp``, ``pp``,
        ``dp``, ``cp`` with ``cp_comm_type`` (``p2p``, ``all_gather``, ``a2a``), ``ep``,
        ``vpp``,
        ``sp``; ``experts``, ``top_k``, ``moe_ffn``,
        ``shared_ffn``, ``moe_layer_freq`` (every N-th layer a mixture of experts, or a
        list of 0 and 1 per layer), ``mtp_layers`` (multi-token prediction depths),
        ``capacity_factor``, ``expert_tp``, ``expert_layout``
        (``within_dp``, ``folded``); ``lora_rank`` with ``lora_targets`` and ``lora_a2a``,
        ``document_tokens``;
        ``schedule`` (``1f1b``, ``gpipe``, ``interleaved``, ``dualpipev``),
        ``microbatch_group``,
        ``pipeline_layout``; ``recompute`` (``none``, ``selective``, ``full``,
        ``every_other_matmul``), ``recompute_modules``, ``recompute_every``,
        ``recompute_layers``,
        ``cpu_offload_layers``, ``offload_modules`` with ``offload_min_elements`` and
        ``offload_max_inflight``;
        ``distributed_optimizer`` (alias ``zero``), ``optimizer`` (``adam``, ``muon``,
        ``dist_muon``), ``fsdp``, ``fsdp_impl`` (``fsdp2``, ``fsdp1``, ``megatron``),
        ``fsdp_shard`` or ``fsdp_replicas``, ``fsdp_outer``
        (``all_reduce``, ``all_reduce_last``, ``optim``),
        ``fsdp_defer_grad_sync``, ``fsdp_reshard`` (``after_forward``, ``after_backward``,
        ``after_step``),
        ``grad_reduce_in_bf16``,
        ``fp8_param_gather``, ``fp8_recipe`` (``delayed``, ``tensorwise``, ``mxfp8``,
        ``nvfp4``), ``fp8_library`` (``transformer_engine``, ``torchao``),
        ``bf16_layers_at_start``, ``bf16_layers_at_end``, ``quant_recipe``,
        ``activation_func_fp8_input_store`` (with ``gated_mlp``),
        ``overlap_grad_reduce``, ``overlap_param_gather``,
        ``align_param_gather``, ``align_grad_reduce``,
        ``tp_comm_overlap`` with ``tp_comm_overlap_cfg`` (``nemo``, ``te_default``),
        ``tp_comm_overlap_disable_qkv`` and ``tp_comm_overlap_rs_dgrad``,
        ``moe_a2a_overlap``, ``dispatcher`` (``alltoall``, ``deepep``) with ``node_limit``,
        ``routing_groups`` and ``fp8_dispatch``,
        ``scatter_gather``, ``bucket_size``, ``cross_entropy_fusion`` with
        ``cross_entropy_fusion_impl`` (``native``, ``te``, ``flash_attn``, ``compiled``),
        ``metric_cross_entropies``;
        ``attention`` (``flash``, ``flash2``, ``unfused``), ``mla`` (``q_lora_rank``,
        ``kv_lora_rank``, ``qk_head_dim``, ``qk_pos_emb_head_dim``, ``v_head_dim``),
        ``window`` (shorter than ``sequence``: with fused attention and ``cp`` 1; as long
        as the sequence it is none), ``window_skip_freq`` (every N-th layer, counted from 1,
        full attention, or a list of 1 (window) and 0 per layer), ``position_embedding``
        (``learned_absolute``, ``rope``, ``alibi``, ``none``), ``dtype`` (``bf16``, ``fp16``,
        ``fp8``, or PyTorch's and Transformer Engine's names of them: ``bfloat16``,
        ``float16``, ``e4m3``, ``hybrid``; ``mxfp8`` and ``nvfp4``: ``fp8`` with that
        ``fp8_recipe``);
        ``device`` (a compute preset) or ``roofline`` (a mapping); ``dims``.

    Returns
    -------
    Workload
        One program per pipeline rank; per-layer rows ``layer0 ...``, ``mtp0 ...`` (the
        multi-token prediction depths), then ``embedding``, ``logits`` (with a vocabulary)
        and ``optimizer``.

    Raises
    ------
    ConfigError
        A bad value, or degrees that do not fit the network.
    """
    unknown = set(values) - set(KEYS)
    if unknown:
        raise config_error("argument", sorted(unknown)[0], "one of " + ", ".join(KEYS),
                           values[sorted(unknown)[0]])
    return build_transformer(network, parse_transformer(values, "argument"))


def build_transformer(network: Any, spec: TransformerSpec) -> Workload:
    """The workload of a validated :class:`TransformerSpec` on ``network``."""
    if not all(hasattr(network, a) for a in ("dims", "npus", "coords")):
        raise config_error("argument", "network",
                           "a built network (flowsim.load_network(...))", network)
    view, groups, pp_dims = map_groups(network, spec)
    layer_counts(spec)   # the layout fits the layers (a clear error before any op is made)
    npus = stages(view, pp_dims, spec.pp)
    bases = tuple(int(n[0]) for n in npus)
    # the ranks each kind of gradient is reduced over: those of its communicator's dims
    dp_size = math.prod(view.dims[d] for d in groups.dp)
    expert_dp_size = math.prod(view.dims[d] for d in groups.expert_dp)
    replicas = math.prod(view.dims[d] for d in groups.replicate)
    programs, memory = [], []
    for s in range(spec.pp):
        ctx = StageContext(stage=s, groups=groups, stage_base=bases, dp_size=dp_size,
                           expert_dp_size=expert_dp_size, replicas=replicas)
        stage = StageProgram(spec, ctx, layer_activation_bytes)
        programs.append(Program(stage.build(), npus[s],
                                f"{_where(spec.source)}transformer stage {s}"))
        memory.append(stage_memory(stage))
    work = Workload(programs, layer_names(spec), "transformer")
    work.memory = max(memory, key=lambda m: m.total).as_dict()
    if view is not network:
        work.network = view
    work.model_flops = megatron(model_shape(spec))
    work.layout = layout_text(spec)
    # the spec's compute model; else the network it runs on names one (at run time, so that
    # a workload built once prices its kernels on every network's device), else the default
    work.compute = spec.roofline or spec.device
    work.fallback_compute = A100_ROOFLINE
    return work


#: the schedules as their papers name them
SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "interleaved"}


def layout_text(spec: TransformerSpec) -> str:
    """The run's layout in one line: ``TP 8 (SP) x CP 2 x PP 16 (4 virtual stages) x DP 64
    (ZeRO-1); 16 micro-batches of 1 x 8,192 tokens per pipeline``."""
    micro = micro_batches(spec)
    parts = [f"TP {spec.tp}" + (" (SP)" if spec.sp else "")]
    if spec.cp > 1:
        parts.append(f"CP {spec.cp}")
    pipeline = f"PP {spec.pp}"
    if spec.vpp > 1:
        pipeline += f" ({spec.vpp} virtual stages)"
    elif spec.pp > 1:
        pipeline += f" ({SCHEDULE_NAMES.get(spec.schedule, spec.schedule)})"
    parts.append(pipeline)
    sharding = " (FSDP)" if spec.fsdp else " (ZeRO-1)" if spec.distributed_optimizer else ""
    if spec.fsdp and 0 < spec.fsdp_shard < spec.dp:   # hybrid sharding
        sharding = f" (HSDP: {spec.dp // spec.fsdp_shard} replicas of {spec.fsdp_shard} shards)"
    parts.append(f"DP {spec.dp}{sharding}")
    text = " x ".join(parts)
    if spec.experts:
        text += f"; EP {spec.ep} of {spec.experts} experts, top {spec.top_k}"
    if spec.lora_rank:
        text += f"; LoRA rank {spec.lora_rank} on {', '.join(spec.lora_targets)}"
    packed = f" (documents of {spec.document_tokens:,})" if spec.document_tokens else ""
    return (text + f"; {micro} micro-batch{'es' if micro != 1 else ''} of "
            f"{spec.micro_batch} x {spec.sequence:,} tokens{packed} per pipeline")


__all__ = ["A100_ROOFLINE", "TransformerSpec", "build_transformer", "layer_counts",
           "layout_text", "model_shape", "parse_transformer", "stage_schedule", "transformer"]


def model_shape(spec: TransformerSpec) -> ModelShape:
    """The numbers of ``spec`` that FLOP conventions count (one iteration of the global
    batch)."""
    return ModelShape(layers=spec.layers, hidden=spec.hidden,
                      ffn=spec.moe_ffn if spec.experts and spec.moe_ffn else spec.ffn,
                      heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim,
                      vocab=spec.vocab, sequence=spec.sequence,
                      global_batch=spec.micro_batch * micro_batches(spec) * spec.dp,
                      gated_mlp=spec.gated_mlp, experts=spec.experts,
                      top_k=spec.top_k or 1, tied_embeddings=spec.tied_embeddings,
                      shared_ffn=spec.shared_ffn, dense_ffn=spec.ffn,
                      mla=None if spec.mla is None else astuple(spec.mla),
                      mtp_layers=spec.mtp_layers, frozen=spec.frozen,
                      mtp_dense=bool(spec.experts) and not spec.is_moe(spec.layers),
                      pattern=spec.hybrid_pattern, mtp_pattern=spec.hybrid_mtp,
                      mtp_repeated=spec.mtp_repeated,
                      moe_latent=spec.moe_latent,
                      mamba=None if spec.mamba is None else (
                          spec.mamba.heads, spec.mamba.head_dim, spec.mamba.state,
                          spec.mamba.groups, spec.mamba.conv),
                      dense_layers=spec.layers - sum(spec.moe_layer_freq)
                      if isinstance(spec.moe_layer_freq, tuple) and spec.moe_layer_freq else 0)
