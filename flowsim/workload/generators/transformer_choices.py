"""The choices of the transformer generator's keys that take one of a few names (or a list of
them): each as a ``Literal`` type and the tuple of its values, which :mod:`.transformer_parse`
checks a spec against. :mod:`.transformer_spec` says what each key means.
"""

from __future__ import annotations

from typing import Literal

from ..._validate import choices_of

#: Pipeline schedules (see :mod:`.transformer_schedule`).
Schedule = Literal["1f1b", "gpipe", "interleaved", "dualpipev"]
SCHEDULES: tuple[Schedule, ...] = choices_of(Schedule)
#: ``every_other_matmul`` is torchtitan's per-op selective recomputation (its ``"op"``
#: policy): see :attr:`~.transformer_kernels.LayerKernels.alternate_matmuls`
Recompute = Literal["none", "selective", "full", "every_other_matmul"]
RECOMPUTES: tuple[Recompute, ...] = choices_of(Recompute)
#: what ``recompute: selective`` re-runs (Megatron-Core's ``--recompute-modules``)
RecomputeModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                          "shared_experts"]
RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = choices_of(RecomputeModule)
AttentionKind = Literal["flash", "flash2", "unfused"]
ATTENTIONS: tuple[AttentionKind, ...] = choices_of(AttentionKind)
#: Megatron-LM's ``--position-embedding-type`` (NeMo's ``position_embedding_type``)
PositionEmbedding = Literal["learned_absolute", "rope", "alibi", "none"]
POSITION_EMBEDDINGS: tuple[PositionEmbedding, ...] = choices_of(PositionEmbedding)
DType = Literal["bf16", "fp16", "fp8"]
#: Where expert parallelism takes its ranks: inside the data-parallel ranks (Megatron-Core before
#: 0.10), or folded over context x data parallelism (0.10 on, "MoE parallel folding")
ExpertLayout = Literal["within_dp", "folded"]
EXPERT_LAYOUTS: tuple[ExpertLayout, ...] = choices_of(ExpertLayout)
#: how context parallelism exchanges keys and values: around a ring, one block per step
#: beside the previous block's attention (Transformer Engine's ``p2p``, Megatron-Core's
#: default), all-gathered before the attention (``all_gather``: Llama 3's), or all-to-alls
#: that trade the sequence shards for shards of the heads (``a2a``: DeepSpeed-Ulysses)
CpCommType = Literal["p2p", "all_gather", "a2a"]
CP_COMM_TYPES: tuple[CpCommType, ...] = choices_of(CpCommType)
#: the linear layers LoRA can adapt (Megatron-Core's module names; :mod:`.transformer_lora`)
LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
LORA_TARGETS: tuple[LoraTarget, ...] = choices_of(LoraTarget)
#: those whose input is split over TP (row-parallel); the others split their output
ROW_PARALLEL: tuple[LoraTarget, ...] = ("linear_proj", "linear_fc2")
#: userbuffers settings of ``tp_comm_overlap`` (:mod:`.transformer_overlap`)
UbConfig = Literal["nemo", "te_default"]
UB_CONFIGS: tuple[UbConfig, ...] = choices_of(UbConfig)
#: when FSDP frees a unit's gathered parameters (:attr:`TransformerSpec.fsdp_reshard`)
FsdpReshard = Literal["after_forward", "after_backward", "after_step"]
FSDP_RESHARDS: tuple[FsdpReshard, ...] = choices_of(FsdpReshard)
#: the optimizers (:mod:`.transformer_optimizer`)
Optimizer = Literal["adam", "muon", "dist_muon"]
OPTIMIZERS: tuple[Optimizer, ...] = choices_of(Optimizer)
#: how a mixture of experts' tokens cross the expert-parallel ranks (:mod:`.transformer_dispatch`)
Dispatcher = Literal["alltoall", "deepep"]
#: the fused cross entropy's implementation (Megatron-Core's ``cross_entropy_fusion_impl``,
#: flash-attn's, LLM Foundry's default loss, torch.compile's, torchtitan's compiled loss, and
#: PyTorch's eager ``F.cross_entropy`` on the 16-bit logits, NeMo AutoModel's
#: ``MaskedCrossEntropy`` without its FP32 cast)
CrossEntropyImpl = Literal["native", "te", "flash_attn", "compiled", "torch"]
CROSS_ENTROPY_IMPLS: tuple[CrossEntropyImpl, ...] = choices_of(CrossEntropyImpl)
#: the library that quantizes the linear layers in FP8 (``fp8_library``)
Fp8Library = Literal["transformer_engine", "torchao"]
FP8_LIBRARIES: tuple[Fp8Library, ...] = choices_of(Fp8Library)
DISPATCHERS: tuple[Dispatcher, ...] = choices_of(Dispatcher)
DTYPES: tuple[DType, ...] = choices_of(DType)

#: how Megatron-FSDP's replicas (hybrid sharding) treat a unit's shard
#: (:attr:`~.transformer_spec.TransformerSpec.fsdp_outer`)
FsdpOuter = Literal["all_reduce", "all_reduce_last", "optim"]
FSDP_OUTERS: tuple[FsdpOuter, ...] = choices_of(FsdpOuter)
#: whose fully sharded data parallelism runs ``fsdp`` (the copies and casts around its
#: collectives: :attr:`~.transformer_spec.TransformerSpec.fsdp_impl`)
FsdpImpl = Literal["fsdp2", "fsdp1", "megatron"]
FSDP_IMPLS: tuple[FsdpImpl, ...] = choices_of(FsdpImpl)
#: the modules whose saved tensors Megatron-Core's fine-grained activation offloading copies
#: to the host (``--offload-modules``; :mod:`.transformer_module_offload`)
OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm",
                        "expert_fc1", "moe_act", "fused_group_mlp"]
OFFLOAD_MODULES: tuple[OffloadModule, ...] = choices_of(OffloadModule)
#: the group of a layer each module's tensors go into, in the order Megatron-Core closes them
OFFLOAD_GROUPS: dict[str, frozenset[str]] = {
    "attention": frozenset({"attn_norm", "qkv_linear", "core_attn", "attn_proj"}),
    "experts": frozenset({"expert_fc1", "moe_act", "fused_group_mlp"}),
    "mlp_norm": frozenset({"mlp_norm"})}
