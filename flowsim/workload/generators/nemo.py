"""A NeMo training config as a transformer spec: ``generator: nemo``.

NeMo 1.x's ``megatron_gpt`` configs (the YAMLs of NeMo-Framework-Launcher and of NVIDIA's DGX
Cloud benchmarking recipes: ``trainer:`` and ``model:`` blocks) describe a run by Megatron-
Core's settings under NeMo's names. This generator reads one (key ``config``: a path, relative
to the spec file, or the mapping itself) and builds the :mod:`transformer <.transformer>`
workload it describes; the data-parallel size is what the network's NPUs leave. From YAML::

    generator: nemo
    config: llama3_70b.yaml
    overrides: model.ub_tp_comm_overlap=true model.global_batch_size=256   # as launched
    vocab: 128256          # any transformer key overrides what the config says

What is read, by NeMo key (``model.`` omitted): the shape (``num_layers``, ``hidden_size``,
``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``kv_channels``,
``encoder_seq_length``, ``activation``: a ``*glu`` is a gated MLP,
``share_embeddings_and_output_weights``), the batch (``micro_batch_size``,
``global_batch_size``), the parallelism (``tensor_``, ``pipeline_``, ``context_``,
``expert_model_parallel_size``, ``virtual_pipeline_model_parallel_size``,
``sequence_parallel``), the experts (``num_moe_experts``, ``moe_router_topk``,
``moe_expert_capacity_factor``, ``moe_shared_expert_intermediate_size``,
``moe_layer_freq``), multi-token prediction (``mtp_num_layers``), multi-latent attention
(``multi_latent_attention`` with ``q_lora_rank``, ``kv_lora_rank``, ``qk_head_dim``,
``qk_pos_emb_head_dim``, ``v_head_dim``), sliding windows (``window_size``,
``window_attn_skip_freq``), recomputation (``activations_checkpoint_granularity``), CPU
offloading (``cpu_offloading``, ``cpu_offloading_num_layers``), precision
(``trainer.precision``, ``fp8``, ``fp8_recipe``, ``fp8_params``,
``fp8_dot_product_attention``),
``ub_tp_comm_overlap`` (NeMo's userbuffers
settings, or Transformer Engine's defaults without ``ub_tp_comm_overlap_cfg``; off without
sequence parallelism, as NeMo turns it off) with ``tp_comm_overlap_disable_qkv`` (or
its older name ``tp_comm_disable_qkv``) and ``tp_comm_overlap_rs_dgrad``,
``transformer_engine`` (false: unfused attention), ``position_embedding_type`` (``rope``
prices the rotary kernels), ``mcore_gpt`` (absent or false: the legacy model, which
scatter-gathers pipeline messages),
``cross_entropy_loss_fusion``, fine-tuning (``peft.peft_scheme: lora`` with
``peft.lora_tuning``'s ``adapter_dim``, ``target_modules`` and ``a2a_experimental``;
:mod:`.nemo_peft`) and the
optimizer
(``optim.name``: :data:`DISTRIBUTED_OPTIMIZERS`, with ``overlap_grad_sync``,
``overlap_param_sync``, ``align_param_gather``, ``align_grad_reduce``, ``grad_sync_dtype``
and ``ddp_bucket_size``; Apex's
``distributed_fused_adam`` overlaps the gradient reduction by default). Keys that shape the time
but have no transformer key (:data:`UNMODELLED`) are named in a warning, and
so is an interpolation (``${...}``) that names no key of the config, taken as NeMo's default
(one that does, such as the launcher's ``${peft.model.data.train_ds.max_seq_length}``, is
read from it). A switch (``fp8``,
``sequence_parallel``, ``mcore_gpt``, ``optim.overlap_grad_sync``, ...) is true or false,
else one error naming it: a quoted ``"false"`` must not price a run in FP8. The vocabulary
comes from ``tokenizer.type`` when it names a known model family (:data:`TOKENIZER_VOCAB`),
else from a ``vocab`` key beside ``config``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any

from ..._validate import as_bool
from ...errors import FlowsimWarning
from .config_files import apply_overrides, config_block, load_config
from .imported import (
    GPT2_VOCAB,
    ImportedSpec,
    causal_window,
    cp_comm_type,
    deepep_keys,
    fp8_recipe,
    packed_warning,
    parse_imported,
    position_embedding,
    recompute_method_keys,
)
from .nemo_peft import packed, peft_keys, resolve

#: NeMo model key -> transformer key (numbers)
NUMBERS = {"num_layers": "layers", "hidden_size": "hidden", "ffn_hidden_size": "ffn",
           "num_attention_heads": "heads", "num_query_groups": "kv_heads",
           "kv_channels": "head_dim", "encoder_seq_length": "sequence",
           "micro_batch_size": "micro_batch", "global_batch_size": "global_batch",
           "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
           "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
           "virtual_pipeline_model_parallel_size": "vpp", "num_moe_experts": "experts",
           "moe_router_topk": "top_k", "moe_expert_capacity_factor": "capacity_factor",
           "moe_shared_expert_intermediate_size": "shared_ffn", "mtp_num_layers": "mtp_layers"}
#: ``optim.name`` of NeMo's distributed optimizers (ZeRO-1: sharded states, reduce-scattered
#: gradients, all-gathered parameters)
DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")
#: vocabulary by a fragment of ``tokenizer.type`` (Hugging Face model names, Megatron's GPT-2
#: tokenizer)
TOKENIZER_VOCAB = {"Meta-Llama-3": 128256, "Llama-3.1": 128256, "Llama-2": 32000,
                   "GPT2BPETokenizer": GPT2_VOCAB, "gpt2": GPT2_VOCAB, "Mixtral-8x7B": 32000}
#: multi-latent attention's model keys and Megatron-Core's defaults (``mla``)
MLA_DEFAULTS = {"q_lora_rank": 512, "kv_lora_rank": 512, "qk_head_dim": 128,
                "qk_pos_emb_head_dim": 64, "v_head_dim": 128}
#: model keys that shape an iteration's time but have no transformer key (named in a warning)
UNMODELLED = ("num_micro_batches_with_partial_activation_checkpoints", "moe_grouped_gemm")


def nemo_keys(config: Any, source: str, overrides: Any = None, *, documents: bool = False
              ) -> dict[str, Any]:
    """The transformer keys a NeMo config (a mapping, or a path relative to ``source``'s
    folder) sets, after Hydra's command-line ``overrides`` (``model.x=y`` items);
    ``documents``: the packed documents' length is given beside it."""
    where, config = load_config(config, source, what="a NeMo config: a YAML path or a mapping",
                                expected="NeMo's trainer and model blocks")
    config = apply_overrides(config, overrides, source, example="model.x=y")
    block = partial(config_block, where=where, what="a NeMo config block")
    model, trainer = block(config, "model"), block(config, "trainer")
    optim = block(model, "optim")
    keys: dict[str, Any] = {}
    switch = partial(config_switch, model, where, "model")
    for nemo, key in NUMBERS.items():
        raw = model.get(nemo)
        value = resolve(config, raw)   # an interpolation: the key it names
        if value is None and isinstance(raw, str):   # naming none: NeMo's default
            warnings.warn(f"{where}: key 'model.{nemo}' is an interpolation ({raw}); "
                          f"taken as NeMo's default (give '{key}' beside 'config')",
                          FlowsimWarning, stacklevel=4)
        elif value is not None:   # null: NeMo's default, which the generator's is
            keys[key] = value
    keys.update(peft_keys(model, where))   # fine-tuning: LoRA's rank and targets
    if keys.get("lora_rank"):   # how the row-parallel adapter's output reaches its shard
        keys["lora_a2a"] = config_switch(model["peft"].get("lora_tuning") or {}, where,
                                         "model.peft.lora_tuning", "a2a_experimental", False)
    if packed(model) and not documents:
        packed_warning(where, "model.data.train_ds.packed_sequence")
    if keys.get("experts"):
        keys.setdefault("top_k", 2)   # Megatron-Core's default
        if model.get("moe_layer_freq") is not None:   # an integer or a list of 0 and 1
            keys["moe_layer_freq"] = model["moe_layer_freq"]
    if model.get("cp_comm_type") is not None:
        keys["cp_comm_type"] = cp_comm_type(model["cp_comm_type"], where, "model.cp_comm_type",
                                            "all_gather")
    if model.get("window_size") is not None:   # (left, right) in Megatron-Core's config
        keys["window"] = causal_window(model["window_size"], where, "model.window_size")
    if model.get("window_attn_skip_freq") is not None:
        keys["window_skip_freq"] = model["window_attn_skip_freq"]
    if switch("multi_latent_attention", False):   # Megatron-Core's MLATransformerConfig defaults
        keys["mla"] = {key: 0 if model.get(key, default) is None else model.get(key, default)
                       for key, default in MLA_DEFAULTS.items()}
    keys["gated_mlp"] = "glu" in str(model.get("activation", "gelu"))
    keys["tied_embeddings"] = switch("share_embeddings_and_output_weights", True)
    keys["sp"] = switch("sequence_parallel", False)
    # NeMo turns the userbuffers off without sequence parallelism; without a config of its
    # own (``ub_tp_comm_overlap_cfg``) Transformer Engine runs them with its defaults
    keys["tp_comm_overlap"] = switch("ub_tp_comm_overlap", False) and keys["sp"]
    keys["tp_comm_overlap_cfg"] = "nemo" if model.get("ub_tp_comm_overlap_cfg") else \
        "te_default"
    granularity = model.get("activations_checkpoint_granularity")
    keys["recompute"] = granularity if granularity in ("selective", "full") else "none"
    if switch("cpu_offloading", False) and switch("cpu_offloading_activations", True):
        layers = resolve(config, model.get("cpu_offloading_num_layers", 0))
        if not isinstance(layers, int):   # NeMo 1's default: ${sub:${model.num_layers},1}
            layers = keys.get("layers", 1) - 1
            warnings.warn(f"{where}: model.cpu_offloading_num_layers is an expression: taken "
                          f"as num_layers - 1 = {layers}, NeMo's default", FlowsimWarning,
                          stacklevel=4)
        keys["cpu_offload_layers"] = layers
    if switch("cpu_offloading", False) and switch("cpu_offloading_weights", False):
        warnings.warn(f"{where}: model.cpu_offloading_weights is on: offloading weights is "
                      "not priced", FlowsimWarning, stacklevel=4)
    if not switch("transformer_engine", True):   # the local layers: no fused attention
        keys["attention"] = "unfused"
    kind = model.get("position_embedding_type", "learned_absolute")
    if isinstance(kind, str) and "${" in kind:   # an interpolation: NeMo's default
        warnings.warn(f"{where}: key 'model.position_embedding_type' is an interpolation "
                      f"({kind}); taken as NeMo's default (give 'position_embedding' beside "
                      "'config')", FlowsimWarning, stacklevel=4)
        kind = "learned_absolute"
    keys["position_embedding"] = position_embedding(kind, where,
                                                    "model.position_embedding_type")
    if keys["position_embedding"] == "rope" and not switch("apply_rope_fusion", False):
        warnings.warn(f"{where}: model.apply_rope_fusion is off (NeMo's default): the "
                      "unfused rotary embeddings are priced as the fused kernel",
                      FlowsimWarning, stacklevel=4)
    precision = str(trainer.get("precision", "bf16"))
    if precision.startswith("32"):
        warnings.warn(f"{where}: trainer.precision {precision}: FP32 training is not "
                      "modelled; priced as BF16", FlowsimWarning, stacklevel=4)
    keys["dtype"] = "fp8" if switch("fp8", False) else "fp16" if precision.startswith("16") \
        else "bf16"
    if keys["dtype"] == "fp8" and model.get("fp8_recipe") is not None:
        keys["fp8_recipe"] = fp8_recipe(model["fp8_recipe"], where, "model.fp8_recipe")
    fp8_params = switch("fp8_params", False)   # read (and checked) with or without FP8
    keys["fp8_param_gather"] = keys["dtype"] == "fp8" and fp8_params
    # Transformer Engine runs the attention in FP8 only in FP8 training
    fp8_attention = switch("fp8_dot_product_attention", False)
    keys["fp8_attention"] = keys["dtype"] == "fp8" and fp8_attention
    # Megatron-Core's TransformerConfig fields, which NeMo 1 copies from the model config
    keys["cross_entropy_fusion"] = switch("cross_entropy_loss_fusion", False)
    keys["activation_func_fp8_input_store"] = switch("activation_func_fp8_input_store", False)
    keys["tp_comm_overlap_rs_dgrad"] = switch("tp_comm_overlap_rs_dgrad", False)
    # Megatron-Core core_v0.7's name of it (NeMo 24.05's configs, MLPerf v4.0's) too
    keys["tp_comm_overlap_disable_qkv"] = switch("tp_comm_overlap_disable_qkv", False) or \
        switch("tp_comm_disable_qkv", False)
    # Megatron-Core's pipeline sends whole tensors (the legacy models scatter-gather them)
    keys["scatter_gather"] = not switch("mcore_gpt", False)
    if optim.get("name") in DISTRIBUTED_OPTIMIZERS:
        apex = optim["name"] == "distributed_fused_adam"   # Apex overlaps grads by default
        keys["distributed_optimizer"] = True
        flag = partial(config_switch, optim, where, "model.optim")
        keys["overlap_grad_reduce"] = flag("overlap_grad_sync", apex)
        keys["overlap_param_gather"] = flag("overlap_param_sync", False)
        # NeMo 1 hands the pipeline schedule Apex's sync functions, Megatron-Core's only
        # as its optimizer settings say (megatron_gpt_model.py, fwd_bwd_step)
        keys["align_param_gather"] = apex or flag("align_param_gather", False)
        keys["align_grad_reduce"] = apex or flag("align_grad_reduce", True)
        keys["grad_reduce_in_bf16"] = optim.get("grad_sync_dtype", "fp32") in ("bf16",
                                                                              "bfloat16")
        if optim.get("ddp_bucket_size"):
            keys["bucket_size"] = optim["ddp_bucket_size"]
    sharding = model.get("fsdp_sharding_strategy", "full")
    fsdp = switch("fsdp", False)
    if fsdp:
        if sharding in ("full", "hybrid"):   # ZeRO-3; hybrid: sharded inside a node
            # PyTorch's FSDP1 (NLPFSDPStrategy), reducing in fsdp_grad_reduce_dtype (32)
            keys.update(fsdp=True, fsdp_impl="fsdp1", grad_reduce_in_bf16="16" in str(
                model.get("fsdp_grad_reduce_dtype", 32)))   # 16, bf16, 16-mixed, bf16-mixed
        if sharding == "hybrid":   # the data-parallel ranks of a node (bad values: later)
            sizes = [trainer.get("devices"), keys.get("tp", 1), keys.get("cp", 1)]
            if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
                keys["fsdp_shard"] = max(1, sizes[0] // (sizes[1] * sizes[2]))
        elif sharding == "grad":   # ZeRO-2: gradients and optimizer states sharded
            keys["distributed_optimizer"] = True
    tokenizer = str(block(model, "tokenizer").get("type", ""))
    for fragment, size in TOKENIZER_VOCAB.items():
        if fragment.lower() in tokenizer.lower():
            keys["vocab"] = size
            break
    left = sorted(f"model.{k}" for k in UNMODELLED if model.get(k) not in (None, False, 0))
    if granularity == "full":
        keys.update(recompute_method_keys(
            model.get("activations_checkpoint_method"),
            model.get("activations_checkpoint_num_layers"), where,
            ("model.activations_checkpoint_method", "model.activations_checkpoint_num_layers")))
    if fsdp and sharding not in ("full", "hybrid", "grad"):
        left.append(f"model.fsdp_sharding_strategy {sharding} (priced as Megatron's DDP)")
    dispatcher = model.get("moe_token_dispatcher_type", "allgather")
    deep = deepep_keys(dispatcher, model.get("moe_flex_dispatcher_backend", "deepep"),
                       model.get("moe_router_num_groups"), model.get("moe_router_group_topk"),
                       keys, where,
                       ("model.moe_router_num_groups", "model.moe_router_group_topk"))
    if deep is not None:
        keys.update(deep)
    elif keys.get("experts") and dispatcher != "alltoall":
        left.append(f"model.moe_token_dispatcher_type {dispatcher} (priced as alltoall)")
    if left:
        warnings.warn(f"{where}: not modelled, left out: {', '.join(left)}", FlowsimWarning,
                      stacklevel=4)
    return keys


def config_switch(block: Mapping[str, Any], where: str, path: str, key: str, default: bool) -> bool:
    """A true/false setting of the config's ``path`` block (absent, null or an
    interpolation: NeMo's ``default``, the interpolation named in a warning); anything but
    a boolean is one error naming it (a quoted ``"false"`` would otherwise read as true)."""
    value = block.get(key)
    if isinstance(value, str) and "${" in value:
        warnings.warn(f"{where}: key '{path}.{key}' is an interpolation ({value}); "
                      f"taken as NeMo's default ({str(default).lower()})", FlowsimWarning,
                      stacklevel=5)
        return default
    return default if value is None else as_bool(value, source=where, key=f"{path}.{key}")


def parse_nemo(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: nemo``: key ``config`` (a NeMo config), optionally ``overrides`` (Hydra's
    command-line items, as a launch script passes them), transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    documents = "document_tokens" in values
    return parse_imported(values, source, read="config",
                          translate=lambda config, src: nemo_keys(config, src, overrides,
                                                                  documents=documents),
                          names={**{key: f"model.{name}" for name, key in NUMBERS.items()},
                                 "fsdp_shard": "model.fsdp_sharding_strategy hybrid: "
                                               "trainer.devices / (tp * cp)",
                                 "moe_layer_freq": "model.moe_layer_freq",
                                 "window_skip_freq": "model.window_attn_skip_freq",
                                 "mla": "model.multi_latent_attention and its widths",
                                 "node_limit": "model.moe_router_group_topk",
                                 "routing_groups": "model.moe_router_num_groups",
                                 "dispatcher": "model.moe_token_dispatcher_type",
                                 "lora_rank": "model.peft.lora_tuning.adapter_dim",
                                 "lora_targets": "model.peft.lora_tuning.target_modules"})
