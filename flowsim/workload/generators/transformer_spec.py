"""The validated arguments of the transformer generator (:mod:`.transformer`): what each key
means, its choices and defaults. :mod:`.transformer_parse` reads and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..kernels import DTYPE_BYTES, Fp8Recipe
from ..roofline import Roofline
from . import transformer_values as tv
from .transformer_choices import (
    LORA_TARGETS,
    AttentionKind,
    CpCommType,
    CrossEntropyImpl,
    Dispatcher,
    DType,
    ExpertLayout,
    Fp8Library,
    FsdpImpl,
    FsdpOuter,
    FsdpReshard,
    LoraTarget,
    OffloadModule,
    Optimizer,
    PositionEmbedding,
    Recompute,
    RecomputeModule,
    Schedule,
    UbConfig,
)
from .transformer_hybrid import MambaMixer
from .transformer_layer_kinds import LayerKinds

#: The compute model when neither the spec nor the network names one, and the keys a partial
#: ``roofline`` mapping leaves out: an A100-like roofline at half of its peaks (312 TFLOP/s
#: 16-bit, 2039 GB/s HBM2e).
A100_ROOFLINE = Roofline(312e12, 2039e9, 0.5)
#: Head dimension when neither ``heads`` nor ``head_dim`` is given.
HEAD_DIM = 128
#: Megatron-LM pads the vocabulary to a multiple of this times the tensor-parallel degree
#: (``--make-vocab-size-divisible-by``, default 128).
VOCAB_MULTIPLE = 128
@dataclass(frozen=True, kw_only=True)
class TransformerSpec(LayerKinds):
    """Validated arguments of :func:`~.transformer.transformer` (hashable); see its docstring
    for every key."""

    layers: int
    hidden: int
    sequence: int
    micro_batch: int = 1
    micro_batches: int = 0
    global_batch: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    gated_mlp: bool = False
    vocab: int = 0
    tied_embeddings: bool = True
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    #: how the CP ranks exchange keys and values (:data:`~.transformer_choices.CP_COMM_TYPES`)
    cp_comm_type: CpCommType = "p2p"
    ep: int = 1
    vpp: int = 1
    sp: bool = False
    experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0
    #: LatentMoE's width (Megatron-Core's ``--moe-latent-size``, Nemotron 3 Super's): tokens
    #: projected down to it before the dispatch and up after the combine, the experts working
    #: on it (:mod:`.transformer_experts`); 0: the hidden width
    moe_latent: int = 0
    #: inner width of the shared experts, all of them together (Megatron-Core's
    #: ``--moe-shared-expert-intermediate-size``): a dense MLP every token passes beside the
    #: routed experts (DeepSeek-V2 and V3, Qwen-MoE, Llama 4); 0: none
    shared_ffn: int = 0
    #: which layers are mixtures of experts (Megatron-Core's ``--moe-layer-freq``): after
    #: defaults a pattern of 0 (dense MLP of width ``ffn``) and 1 per layer, or () for every
    #: layer (as given: an integer N, every N-th layer from layer 0, or the pattern)
    moe_layer_freq: tuple[int, ...] | int = ()
    #: multi-head latent attention's widths (DeepSeek-V2/V3, Kimi K2); None: standard
    mla: tv.LatentAttention | None = None
    #: multi-token prediction depths (Megatron-Core's ``--mtp-num-layers``, DeepSeek-V3's
    #: MTP modules): each another transformer layer, of the last layer's kind, on the last
    #: pipeline stage, with an embedding lookup, a projection and the output layer again
    #: (:mod:`.transformer_mtp`)
    mtp_layers: int = 0
    #: the depths share one layer, its weights and its gradients, run once per depth
    #: (Megatron-Core's ``--mtp-use-repeated-layer``, Nemotron 3 Super's)
    mtp_repeated: bool = False
    #: LoRA fine-tuning (:mod:`.transformer_lora`): the adapters' rank (Megatron-Bridge's
    #: ``LoRA.dim``) on every layer's QKV, projection, FC1 and FC2; every base weight frozen.
    #: 0: no adapters, every weight trained
    lora_rank: int = 0
    #: the layers with adapters (Megatron-Bridge's ``LoRA.target_modules``; its default: all)
    lora_targets: tuple[LoraTarget, ...] = LORA_TARGETS
    #: a row-parallel adapter's output moved from hidden- to sequence-parallel by one
    #: all-to-all (NeMo's ``a2a_experimental``), not gathered whole (sequence parallelism)
    lora_a2a: bool = False
    #: packed sequences (Megatron's THD format, fine-tuning's packed datasets): each sequence
    #: holds documents of this many tokens (the last one shorter), each attending only to
    #: itself (Transformer Engine's ``cu_seqlens``); 0: one document per sequence
    document_tokens: int = 0
    #: a hybrid model's layers, one character each (Megatron-Core's
    #: ``--hybrid-override-pattern``): ``M`` a Mamba-2 mixer, ``*`` attention, ``-`` a dense
    #: MLP, ``E`` a mixture of experts, each with its own norm and residual
    #: (:mod:`.transformer_hybrid`); "": every layer attention and an MLP
    hybrid_pattern: str = ""
    #: the Mamba-2 mixers' widths (None without ``M`` layers)
    mamba: MambaMixer | None = None
    #: a hybrid model's multi-token prediction depth (``*E`` or ``*-``: an attention layer
    #: and its MLP), what follows each ``/`` in its pattern; "": none
    hybrid_mtp: str = ""
    #: sliding window in keys (0: full attention); window_skip_freq: 1 window / 0 full per layer
    window: int = 0
    window_skip_freq: tuple[int, ...] | int | None = None
    capacity_factor: float = 1.0
    #: where the expert-parallel ranks come from (:data:`~.transformer_choices.EXPERT_LAYOUTS`)
    expert_layout: ExpertLayout = "within_dp"
    #: tensor-parallel ranks each expert is split over (Megatron-Core's
    #: ``--expert-tensor-parallel-size``): ``tp`` (its default) or 1; 0 before defaults
    expert_tp: int = 0
    schedule: Schedule = "1f1b"
    #: with the interleaved schedule, the micro-batches each model chunk runs in a row
    #: (Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``, from core
    #: 0.10); 0: ``pp``, the group of every release before
    microbatch_group: int = 0
    pipeline_layout: tuple[int, ...] | str = "even"
    recompute: Recompute = "none"
    #: with ``recompute: full``, every N-th layer recomputed (the N-th, 2N-th, ... counted
    #: from the first: torchtitan's ``selective_ac_option: "N"``); 1: every layer
    recompute_every: int = 1
    #: with ``recompute: full``, only the first N layers of each model chunk recomputed
    #: (Megatron-Core's ``--recompute-method block --recompute-num-layers N``); 0: every layer
    recompute_layers: int = 0
    #: with ``recompute: selective``, the modules re-run before their backward (Megatron-Core's
    #: ``--recompute-modules``; :attr:`recomputed_modules`); empty: its default, ``core_attn``
    recompute_modules: tuple[RecomputeModule, ...] = ()
    #: the first N layers' saved activations copied to host memory during the forward and
    #: back for the backward (Megatron-Core's ``--cpu-offloading-num-layers`` on Transformer
    #: Engine's default schedule: :mod:`.transformer_offload`); 0: none
    cpu_offload_layers: int = 0
    distributed_optimizer: bool = False
    #: Adam, or Muon with or without the layer-wise sharding (:mod:`.transformer_optimizer`)
    optimizer: Optimizer = "adam"
    #: gradients reduced in 16 bits (Megatron-LM's ``--grad-reduce-in-bf16``, NeMo's
    #: ``grad_sync_dtype: bf16``) instead of FP32 in BF16 and FP8 training
    grad_reduce_in_bf16: bool = False
    #: low-precision training keeps the layers' weights in FP8 (NVFP4), so the optimizer gathers
    #: them so (``--fp8-param-gather``, ``--fp4-param-gather``, NeMo's ``fp8_params``; MXFP8's
    #: are gathered in 16 bits and cast after: :func:`.transformer_values.weight_bytes`)
    fp8_param_gather: bool = False
    #: SwiGLU keeps its input for the backward in FP8, cast to it and back
    #: (Megatron-Core's ``--activation-func-fp8-input-store``)
    activation_func_fp8_input_store: bool = False
    #: FP8 scaling or NVFP4 (``FP8_RECIPES``: ``--fp8-recipe``; :mod:`flowsim.compute.quantize`)
    fp8_recipe: Fp8Recipe = "delayed"
    #: who quantizes: Transformer Engine keeps a linear layer's quantized input for its
    #: backward, torchao's Float8Linear (torchtitan's) its 16-bit one (:mod:`.transformer_saved`)
    fp8_library: Fp8Library = "transformer_engine"
    #: the first and the last N decoder layers in 16 bits, outside the FP8 (NVFP4) autocast
    #: (Megatron-Core's ``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16``
    #: and ``--num-layers-at-end-in-bf16``: :mod:`.transformer_precision`)
    bf16_layers_at_start: int = 0
    bf16_layers_at_end: int = 0
    #: a precision per module: Megatron-Core's quantization recipe, its enabled matchers in
    #: order (``--te-precision-config-file``; :class:`.transformer_precision.QuantRule`)
    quant_recipe: tuple[Any, ...] = ()
    #: one layer's modules whose precision differs from the layer's: (module, precision);
    #: set per layer by :func:`.transformer_precision.in_precision`, never read from a spec
    module_precision: tuple[tuple[str, str], ...] = ()
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    #: with the interleaved schedule, the overlapped parameter gathers of a model chunk all
    #: start together, timed alike on every pipeline rank (Megatron-LM's default from
    #: core_r0.9, ``--no-align-param-gather`` to turn off; NeMo 2's communication-overlap
    #: callback with PP and VP); else one bucket at a time
    align_param_gather: bool = True
    #: with pipeline parallelism, the overlapped gradient reductions of a model chunk all
    #: start together once its last backward is done, timed alike on every pipeline rank
    #: (without interleaving: the first stage's during its last backward, the others' after
    #: it); Megatron-LM's default (r0.8's ``delay_grad_reduce``, later ``align_grad_reduce``)
    #: and NeMo 1's; NeMo 2 reduces bucket by bucket on every stage
    align_grad_reduce: bool = True
    #: fully sharded data parallelism (ZeRO-3 as PyTorch FSDP2 runs it, torchtitan's and
    #: Megatron-LM's ``--use-torch-fsdp2``): each layer's parameters gathered before its
    #: forward and backward, its gradients reduce-scattered after its backward
    fsdp: bool = False
    #: with ``fsdp``, the gradients reduce-scattered once, after the last micro-batch's
    #: backward (FSDP2's ``set_requires_gradient_sync(False)`` on the others; NeMo AutoModel's
    #: ``defer_fsdp_grad_sync``), each unit's accumulating unsharded until then
    fsdp_defer_grad_sync: bool = False
    #: with ``fsdp`` and no pipeline, when a unit's gathered parameters are freed
    #: (:data:`~.transformer_choices.FSDP_RESHARDS`): after its forward and after its
    #: backward (FSDP2's default), after its backward only (``reshard_after_forward=False``),
    #: or after the step's last backward (kept across micro-batches:
    #: ``set_reshard_after_backward(False)``)
    fsdp_reshard: FsdpReshard = "after_forward"
    #: with ``fsdp``, the data-parallel ranks a unit's parameters are sharded over (hybrid
    #: sharding, HSDP: torchtitan's ``data_parallel_shard_degree``); the ``dp / fsdp_shard``
    #: groups of them hold replicas and all-reduce their gradient shards; 0: all of them
    fsdp_shard: int = 0
    #: with ``fsdp``, the replicas instead (``dp / fsdp_shard``: Megatron-FSDP's
    #: ``num_distributed_optimizer_instances``); 0: from ``fsdp_shard``
    fsdp_replicas: int = 0
    #: with ``fsdp`` and replicas (``fsdp_shard < dp``), what they do with a unit's shard
    #: (:data:`~.transformer_choices.FSDP_OUTERS`): all-reduce its gradients with each
    #: reduce-scatter (FSDP2's HSDP); all-reduce them once, after the last micro-batch's
    #: (``all_reduce_last``: Megatron-FSDP's HSDP); or then reduce-scatter them, each rank's
    #: optimizer updating ``1/dp`` of the unit, whose shard the replicas all-gather in the
    #: step's first forward and backward (``optim``: Megatron-FSDP's
    #: ``outer_dp_sharding_strategy``)
    fsdp_outer: FsdpOuter = "all_reduce"
    #: with ``fsdp``, whose implementation (:data:`~.transformer_choices.FSDP_IMPLS`):
    #: PyTorch's FSDP2 (torchtitan, NeMo AutoModel, ``--use-torch-fsdp2``) copies each unit's
    #: gathered parameters out of the all-gather's buffer and its gradient into the
    #: reduction's; FSDP1 (``FullyShardedDataParallel``: Composer, NeMo 1) casts the gradient
    #: to the reduction's type and pre-divides it; Megatron-FSDP keeps both in the buffers it
    #: communicates (:mod:`.transformer_fsdp`)
    fsdp_impl: FsdpImpl = "fsdp2"
    #: Megatron-Core's fine-grained activation offloading (``--offload-modules``): the
    #: modules whose saved tensors are copied to host memory and back
    #: (:mod:`.transformer_module_offload`)
    offload_modules: tuple[OffloadModule, ...] = ()
    #: the smallest tensor they copy, in elements (``--min-offloaded-tensor-size``)
    offload_min_elements: int = 1024 * 1024
    #: copies to the host in flight before the compute waits for the oldest
    #: (``fine_grained_offloading_max_inflight_offloads``); None: it never waits
    offload_max_inflight: int | None = None
    tp_comm_overlap: bool = False
    #: QKV's input all-gathered by NCCL, not by userbuffers (Megatron-Core's
    #: ``tp_comm_overlap_disable_qkv``); an adapter on QKV then reads the gathered norm
    #: output Transformer Engine returns instead of gathering its input itself
    tp_comm_overlap_disable_qkv: bool = False
    #: the column-parallel layers' data-gradient reduce-scatter pipelined with the data
    #: gradient GEMM (Megatron-Core's ``tp_comm_overlap_rs_dgrad``), not bulk beside the
    #: weight gradient (:mod:`.transformer_overlap`)
    tp_comm_overlap_rs_dgrad: bool = False
    #: a micro-batch's forward run beside another's backward, so that the expert all-to-alls
    #: of one hide behind the other's compute (Megatron-Core's combined 1F1B,
    #: ``--overlap-moe-expert-parallel-comm``): one more warm-up forward, then each forward
    #: paired with the backward after it
    moe_a2a_overlap: bool = False
    #: how tokens cross the expert-parallel ranks (:data:`~.transformer_choices.DISPATCHERS`):
    #: Megatron-Core's all-to-all dispatcher, or DeepEP's (once per node over the scale-out network)
    dispatcher: Dispatcher = "alltoall"
    #: node-limited routing (DeepSeek-V3's M): a token's experts on at most this many nodes,
    #: or of ``routing_groups``' groups; 0: any (:mod:`.transformer_dispatch`)
    node_limit: int = 0
    #: the groups ``node_limit`` counts (Megatron-Core's ``--moe-router-num-groups``); 0: a
    #: group per node the expert-parallel group spans
    routing_groups: int = 0
    #: the all-to-alls toward the experts in FP8 (DeepSeek-V3, DeepEP's FP8 dispatch): the
    #: forward dispatch and the backward's gradient of the combine; the others in 16 bits
    fp8_dispatch: bool = False
    #: the experts' MLP as Transformer Engine's fused grouped MLP
    #: (``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` with Megatron-Core's
    #: ``use_transformer_engine_op_fuser``; Megatron-Bridge's ``cutedsl_fused_grouped_mlp``):
    #: activation and casts in the grouped GEMMs' epilogues (:mod:`.transformer_experts`);
    #: block-scaled recipes only
    fused_grouped_mlp: bool = False
    #: the fused attention in FP8 (Transformer Engine's ``fp8_dot_product_attention``,
    #: Megatron-LM's ``--fp8-dot-product-attention``): its inputs and output gradient cast
    #: under the recipe, the kernel at cuDNN's measured FP8 speed
    #: (:mod:`flowsim.compute.attention_fp8`)
    fp8_attention: bool = False
    #: whose userbuffers settings: NeMo's H100 configs or Transformer Engine's defaults
    tp_comm_overlap_cfg: UbConfig = "nemo"
    scatter_gather: bool = True
    bucket_size: int = 0
    #: the vocabulary-parallel cross entropy's elementwise steps fused (Megatron-Core's
    #: ``cross_entropy_loss_fusion``, ``--cross-entropy-loss-fusion``; NeMo 2's default):
    #: fewer passes over the FP32 logits than the unfused steps (Megatron-LM's default)
    cross_entropy_fusion: bool = False
    #: which fused cross entropy (``--cross-entropy-fusion-impl``): Megatron-Core's own
    #: (``native``), Transformer Engine's Triton kernels (``te``: two passes over the 16-bit
    #: logits, the gradient written in place; Megatron-Bridge's performance recipes),
    #: flash-attn's (``flash_attn``: one pass each way; LLM Foundry's ``fused_crossentropy``),
    #: PyTorch's compiled by ``torch.compile`` (``compiled``: torchtitan's loss) or PyTorch's
    #: eager one on the 16-bit logits (``torch``: NeMo AutoModel's)
    cross_entropy_fusion_impl: CrossEntropyImpl = "native"
    #: cross entropies computed again over each micro-batch's logits, after its backward, for
    #: training metrics (Composer's ``LanguageCrossEntropy`` and ``LanguagePerplexity``: two
    #: in LLM Foundry's runs), each PyTorch's (:data:`~.transformer_shapes.METRIC_BYTES`)
    metric_cross_entropies: int = 0
    attention: AttentionKind = "flash"
    #: rotary embeddings (``rope``: Llama, Nemotron, Grok) rotate the queries and keys of
    #: every layer, a memory-bound kernel forward and backward; GPT's learned absolute ones
    #: are added once in the embedding, ALiBi's bias inside the attention kernel
    position_embedding: PositionEmbedding = "learned_absolute"
    dtype: DType = "bf16"
    device: str | None = None
    roofline: Roofline | None = None
    #: ``((parallelism, dims), ...)``, or None for the default mapping
    dims: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    source: str = field(default="argument", compare=False)

    @property
    def dtype_bytes(self) -> int:
        return int(DTYPE_BYTES[self.dtype])

    @property
    def cross_entropy(self) -> str:
        """The cross entropy run: ``unfused``, or the fused one's implementation."""
        return self.cross_entropy_fusion_impl if self.cross_entropy_fusion else "unfused"

    @property
    def padded_vocab(self) -> int:
        """The vocabulary padded as Megatron-LM pads it (0: no embedding or logits)."""
        step = VOCAB_MULTIPLE * self.tp
        return -(-self.vocab // step) * step if self.vocab else 0

    @property
    def interleaved(self) -> bool:
        """Megatron's interleaved schedule (not DualPipeV's V, whose two chunks per rank
        are not interleaved in Megatron's order)."""
        return self.schedule == "interleaved"

    @property
    def interleave_group(self) -> int:
        """Micro-batches each model chunk runs in a row: ``microbatch_group``, else ``pp``."""
        return self.microbatch_group or self.pp

    @property
    def mtp_depths(self) -> range:
        """The multi-token prediction depths' layer indices (their rows and parameter units),
        after the decoder's layers."""
        return range(self.layers, self.layers + self.mtp_layers)

    @property
    def sharded_optimizer(self) -> bool:
        """Whether a data-parallel rank updates only its share of the weights (ZeRO-1, or
        Muon's layer-wise distributed optimizer)."""
        return self.distributed_optimizer or self.optimizer == "dist_muon"

    @property
    def frozen(self) -> bool:
        """Whether the base weights are frozen (LoRA: only the adapters train), so no layer
        computes a weight gradient of its own or gathers an input for one."""
        return self.lora_rank > 0

    @property
    def ends_on_one_rank(self) -> bool:
        """Whether one pipeline rank holds both the first and the last virtual stage (no
        pipeline, or DualPipeV's V)."""
        return self.pp * self.vpp == 1 or self.schedule == "dualpipev"

    def nccl_gathers(self, layer: str) -> bool:
        """Whether userbuffers leave ``layer``'s (``qkv``, ``fc1``: a layer-norm
        column-parallel layer) all-gather to NCCL and its data-gradient reduce-scatter
        unpipelined (Megatron-Core's ``tp_comm_overlap_disable_qkv`` for QKV)."""
        return layer == "qkv" and self.tp_comm_overlap_disable_qkv

    def is_recomputed(self, layer: int, position: int) -> bool:
        """Whether full recomputation re-runs ``layer``, the ``position``-th of its model
        chunk (Megatron-Core's block method counts the layers of each chunk from its first).
        A multi-token prediction depth is re-run whole under the uniform method and skipped
        under the block method (Megatron-Core's ``MultiTokenPredictionBlock``)."""
        if self.recompute != "full":
            return False
        if layer >= self.layers:
            return not self.recompute_layers
        if self.recompute_layers:
            return position < self.recompute_layers
        return (layer + 1) % self.recompute_every == 0

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """The modules selective recomputation re-runs (none without it)."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)

    @property
    def one_tied_weight(self) -> bool:
        """Whether the embedding and the output layer are one tied weight: tied and on one
        stage (one gradient, one optimizer state, one all-gather). On different virtual
        stages Megatron keeps a copy on each, priced so also where one rank holds both
        (DualPipeV's first rank); their gradients' all-reduce is left out."""
        return self.tied_embeddings and self.pp * self.vpp == 1


#: Keys accepted for compatibility, and what they mean now
LEGACY = {"zero": "distributed_optimizer", "dtype_bytes": "dtype"}
KEYS = tuple(f.name for f in fields(TransformerSpec)
             if f.name not in ("source", "module_precision")) + tuple(LEGACY)
