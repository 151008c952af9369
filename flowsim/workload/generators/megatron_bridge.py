"""A Megatron-Bridge run's saved configuration as a transformer spec:
``generator: megatron_bridge``.

Megatron-Bridge writes a run's whole ``ConfigContainer`` into every checkpoint it saves
(``run_config.yaml``: ``save_checkpoint`` calls ``cfg.to_yaml``,
``src/megatron/bridge/training/checkpointing.py`` at 8f341b04f), and at setup where
``logger.save_config_filepath`` says. The file is ``yaml.safe_dump`` of the container's
``to_dict`` (Megatron-LM ``megatron/training/config/container.py``): one block per section
(``model``, ``train``, ``ddp``, ``optimizer``, ``comm_overlap``, ``peft``, ``dataset``, ...),
each dataclass a mapping with its class as ``_target_``, functions and dtypes as
``{_target_: ..., _call_: false}``. The ``model`` block is the model provider, Megatron-Core's
``TransformerConfig`` fields as the run set them up (the precision and overlap settings
already applied). This generator reads the file (key ``config``: a path, relative to the spec
file, or the mapping itself), optionally with ``overrides`` (``section.key=value`` items, as
Megatron-Bridge's scripts take them), and builds the :mod:`transformer <.transformer>`
workload; the data-parallel size is what the network's NPUs leave::

    generator: megatron_bridge
    config: checkpoints/iter_0001000/run_config.yaml
    overrides: train.global_batch_size=256

What is read, by Megatron-Bridge path: ``model.`` the shape (``num_layers``, ``hidden_size``,
``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``kv_channels``,
``seq_length``, ``vocab_size`` padded as ``should_pad_vocab`` says, ``gated_linear_unit``,
``position_embedding_type``, ``share_embeddings_and_output_weights``), the parallel sizes and
``sequence_parallel``, the experts (``num_moe_experts``, ``moe_router_topk``,
``moe_ffn_hidden_size``, ``moe_shared_expert_intermediate_size``, ``moe_layer_freq``,
``moe_token_dispatcher_type``, ``expert_tensor_parallel_size``,
``overlap_moe_expert_parallel_comm``), the pipeline split
(``num_layers_in_first_pipeline_stage``, ``..._last_...``,
``account_for_embedding_in_pipeline_split``, ``..._loss_...``,
``pipeline_model_parallel_layout``, read as Megatron-LM's flags are), latent attention and its
widths, ``mtp_num_layers``, sliding windows, recomputation (``recompute_granularity``,
``recompute_method``, ``recompute_num_layers``), CPU offloading (``cpu_offloading``,
``cpu_offloading_num_layers``), precision (``bf16``, ``fp8``, ``fp8_recipe``,
``fp8_param``, ``fp4``, ``fp8_dot_product_attention``), ``tp_comm_overlap``, the cross
entropy's fusion; ``train.global_batch_size`` and ``micro_batch_size``; ``ddp.`` the overlaps,
``bucket_size``, ``grad_reduce_in_fp32``, ``align_param_gather``,
``use_distributed_optimizer``; ``dist.align_grad_reduce``; ``optimizer.optimizer`` (Adam,
Muon or its layer-wise ``dist_muon``);
``comm_overlap.tp_comm_overlap_cfg`` (userbuffers settings of their own: NeMo's; none:
Transformer Engine's defaults); ``peft`` (LoRA: ``dim``, ``target_modules``,
``a2a_experimental``; any other method is refused); ``dataset.packed_sequence_specs``
(packed documents: named in a warning unless ``document_tokens`` is given beside
``config``). The rest goes through the NeMo importer's
reading of the same Megatron-Core settings (:func:`.nemo.nemo_keys`), so the two agree on what
a setting costs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any

from ...errors import ConfigError, FlowsimWarning, config_error
from .config_files import apply_overrides, config_block, load_config
from .imported import (
    ImportedSpec,
    cross_entropy_impl,
    lora_keys,
    packed_warning,
    parse_imported,
    recompute_modules_keys,
    renamed,
)
from .megatron_fsdp import bridge_fsdp_keys
from .megatron_layout import EMBEDDING, FIRST, LAST, LAYOUT, LOSS, layout_keys
from .megatron_offload import bridge_offload_keys
from .nemo import NUMBERS, config_switch, nemo_keys
from .transformer_choices import LORA_TARGETS
from .transformer_hybrid import hybrid_keys

#: ``model.`` settings Megatron-Bridge and NeMo 1 name alike (NeMo 1's ``encoder_seq_length``
#: is Megatron-Core's ``seq_length``)
_SAME = tuple(k for k in NUMBERS if k not in ("encoder_seq_length", "micro_batch_size",
                                              "global_batch_size"))
_ALSO = ("sequence_parallel", "position_embedding_type", "share_embeddings_and_output_weights",
         "moe_layer_freq", "cp_comm_type", "window_size", "window_attn_skip_freq",
         "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
         "qk_pos_emb_head_dim", "v_head_dim", "fp8_recipe", "fp8_dot_product_attention",
         "cross_entropy_loss_fusion", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
         "moe_router_num_groups", "moe_router_group_topk", "apply_rope_fusion",
         "cpu_offloading", "cpu_offloading_num_layers", "cpu_offloading_weights",
         "cpu_offloading_activations", "activation_func_fp8_input_store",
         "tp_comm_overlap_disable_qkv", "tp_comm_overlap_rs_dgrad")
#: the PEFT methods priced (``peft._target_``'s class name)
LORA = "LoRA"


def bridge_keys(config: Any, source: str, overrides: Any = None, *, documents: bool = False
                ) -> dict[str, Any]:
    """The transformer keys a Megatron-Bridge ``run_config.yaml`` (a mapping, or a path
    relative to ``source``'s folder) sets, after ``overrides``; ``documents``: the packed
    documents' length is given beside it."""
    where, config = load_config(config, source, what="a Megatron-Bridge run_config.yaml: "
                                "a YAML path or a mapping", expected="Megatron-Bridge's "
                                "ConfigContainer (model:, train:, ddp:, ... blocks)")
    config = apply_overrides(config, overrides, source, example="train.global_batch_size=256")
    block = partial(config_block, where=where, what="a Megatron-Bridge config block")
    model, train, ddp = block(config, "model"), block(config, "train"), block(config, "ddp")
    dist = block(config, "dist")
    if not model:
        raise config_error(where, "model", "the model provider's block", None)
    if not train:   # a checkpoint conversion's file (save_megatron_model): no training run
        raise config_error(where, "train", "a training run's block (a converted "
                           "checkpoint's run_config.yaml describes no run)", None)
    nemo1: dict[str, Any] = {k: model.get(k) for k in (*_SAME, *_ALSO)}
    nemo1.update(
        encoder_seq_length=model.get("seq_length"),
        micro_batch_size=train.get("micro_batch_size"),
        global_batch_size=train.get("global_batch_size"),
        moe_shared_expert_intermediate_size=model.get("moe_shared_expert_intermediate_size"),
        activation="swiglu" if model.get("gated_linear_unit") else "gelu",
        mcore_gpt=True, transformer_engine=model.get("transformer_impl", "transformer_engine")
        == "transformer_engine",
        fp8=bool(model.get("fp8")), fp8_params=bool(model.get("fp8_param")),
        ub_tp_comm_overlap=bool(model.get("tp_comm_overlap")),
        ub_tp_comm_overlap_cfg=(block(config, "comm_overlap").get("tp_comm_overlap_cfg")
                                or None),
        activations_checkpoint_granularity=model.get("recompute_granularity"),
        activations_checkpoint_method=model.get("recompute_method"),
        activations_checkpoint_num_layers=model.get("recompute_num_layers"),
        optim={"name": "mcore_distributed_optim" if ddp.get("use_distributed_optimizer")
               else "fused_adam",   # the gradients' settings: below, with or without it
               "overlap_param_sync": ddp.get("overlap_param_gather"),
               "align_param_gather": ddp.get("align_param_gather")})
    nemo1 = {k: v for k, v in nemo1.items() if v is not None}
    precision = "bf16" if model.get("bf16", True) else "16" if model.get("fp16") else "32"
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", FlowsimWarning)
            keys = nemo_keys({"trainer": {"precision": precision}, "model": nemo1}, where)
    except ConfigError as exc:   # name the setting by its Megatron-Bridge path
        raise ConfigError(renamed(str(exc), _PATHS)) from None
    for note in notes:   # the NeMo importer's notes, in Megatron-Bridge's names
        warnings.warn(renamed(str(note.message), _PATHS), note.category, stacklevel=4)
    if keys.get("experts"):   # Megatron-Core's expert ranks: folded over CP x DP
        keys["expert_layout"] = "folded"
        if model.get("moe_ffn_hidden_size"):   # the experts' width (ffn: the dense layers')
            keys["moe_ffn"] = model["moe_ffn_hidden_size"]
        if model.get("expert_tensor_parallel_size") is not None:
            keys["expert_tp"] = model["expert_tensor_parallel_size"]
        keys["moe_a2a_overlap"] = bool(model.get("overlap_moe_expert_parallel_comm"))
    keys.update(hybrid_keys(   # a hybrid model's pattern (either name) and Mamba-2 widths
        model.get("hybrid_layer_pattern") or model.get("hybrid_override_pattern"),
        {key: model.get(f"mamba_{name}") for key, name in _MAMBA.items()}))
    if model.get("moe_latent_size"):   # LatentMoE (Nemotron 3 Super)
        keys["moe_latent"] = model["moe_latent_size"]
    if model.get("mtp_use_repeated_layer"):
        keys["mtp_repeated"] = True
    keys.update(_pipeline_split(model, keys, where))
    if keys.get("recompute") == "selective" and model.get("recompute_modules") is not None:
        keys.update(recompute_modules_keys(model["recompute_modules"], where,
                                           "model.recompute_modules"))
    # Megatron-Core's DDP reduces the gradients as these say, distributed optimizer or not
    keys["overlap_grad_reduce"] = config_switch(ddp, where, "ddp", "overlap_grad_reduce", False)
    keys["grad_reduce_in_bf16"] = not config_switch(ddp, where, "ddp", "grad_reduce_in_fp32",
                                                    False)
    keys["align_grad_reduce"] = config_switch(dist, where, "dist", "align_grad_reduce", True)
    if ddp.get("bucket_size") is not None:
        keys["bucket_size"] = ddp["bucket_size"]
    keys.update(bridge_fsdp_keys(ddp, where))   # Megatron-FSDP
    keys.update(bridge_offload_keys(model, where))   # offloading module by module
    keys.update(_muon_keys(block(config, "optimizer"), ddp, keys, where))
    if model.get("vocab_size"):
        keys["vocab"] = _vocabulary(model)
    if model.get("fp4"):   # NVFP4's GEMMs (Megatron-Bridge's bf16_with_nvfp4_mixed)
        keys["dtype"], keys["fp8_recipe"] = "fp8", "nvfp4"
    if model.get("first_last_layers_bf16") and (model.get("fp8") or model.get("fp4")):
        for end in ("start", "end"):   # (Megatron-Core's defaults: one layer each)
            keys[f"bf16_layers_at_{end}"] = model.get(f"num_layers_at_{end}_in_bf16", 1)
    recipe = model.get("quant_recipe")   # Megatron-Core's recipe, or its file
    if isinstance(recipe, Mapping) and "_target_" in recipe:   # to_yaml keeps only its class
        raise config_error(where, "model.quant_recipe", "the recipe's configs and matchers or "
                           "its file (run_config.yaml keeps only the class: give "
                           "model.quant_recipe=<its te_quant.cfg> among the overrides)",
                           recipe.get("_target_"))
    if recipe is not None:
        keys["quant_recipe"] = recipe
    keys.update(cross_entropy_impl(model.get("cross_entropy_fusion_impl"),
                                   keys.get("cross_entropy_fusion", False), where,
                                   "model.cross_entropy_fusion_impl"))
    keys.update(_lora(config.get("peft"), where))
    packed = block(block(config, "dataset"), "packed_sequence_specs").get(
        "packed_sequence_size")
    if isinstance(packed, int) and packed > 0 and not documents:   # -1: not packed
        packed_warning(where, "dataset.packed_sequence_specs")
    return keys


def _muon_keys(optimizer: Mapping[str, Any], ddp: Mapping[str, Any], keys: Mapping[str, Any],
               where: str) -> dict[str, Any]:
    """The transformer's ``optimizer`` from ``optimizer.optimizer``: Muon, layer-wise for a
    name with "dist" or ``use_layer_wise_distributed_optimizer`` (Megatron-Bridge's
    ``training/optim.py``), on the parameter layout with ``ddp.use_distributed_optimizer``
    and on its first path without; each tensor-parallel rank on its own shard."""
    name = optimizer.get("optimizer", "adam")
    if name not in ("muon", "dist_muon"):
        if name != "adam":
            warnings.warn(f"{where}: optimizer.optimizer {name}: priced as Adam",
                          FlowsimWarning, stacklevel=5)
        return {}
    mode = optimizer.get("muon_tp_mode") or "blockwise"
    if keys.get("tp", 1) > 1 and mode != "blockwise":
        raise config_error(where, "optimizer.muon_tp_mode", "blockwise with TP > 1 (each "
                           "rank orthogonalizing its shard: what flowsim prices)", mode)
    if name == "muon" and not optimizer.get("use_layer_wise_distributed_optimizer"):
        return {"optimizer": "muon", "distributed_optimizer": False}
    if ddp.get("use_distributed_optimizer"):   # the layer-wise optimizer's parameter layout
        return {"optimizer": "muon", "distributed_optimizer": True}
    return {"optimizer": "dist_muon"}


#: the Mamba-2 widths (``mamba`` keys) -> Megatron-Core's ``mamba_`` settings
_MAMBA = {"heads": "num_heads", "head_dim": "head_dim", "state": "state_dim",
          "groups": "num_groups", "chunk": "chunk_size"}


#: Megatron-Core's pipeline split settings (``model.``) -> Megatron-LM's flags, whose reading
#: (:mod:`.megatron_layout`) they share
_SPLIT = {"pipeline_model_parallel_layout": LAYOUT,
          "num_layers_in_first_pipeline_stage": FIRST,
          "num_layers_in_last_pipeline_stage": LAST,
          "account_for_embedding_in_pipeline_split": EMBEDDING,
          "account_for_loss_in_pipeline_split": LOSS}


def _pipeline_split(model: Mapping[str, Any], keys: Mapping[str, Any], where: str
                    ) -> dict[str, Any]:
    """The ``pipeline_layout`` Megatron-Core's split settings give, read as Megatron-LM's
    flags are (uneven first and last stages, the embedding and the loss counted as layers, a
    layout string), errors naming the Megatron-Bridge path. A layout saved as an object
    (Megatron-Bridge 26.06 writes ``PipelineParallelLayerLayout`` without its stages) is
    named in a warning and left out."""
    flags: dict[str, str | None] = {}
    for field, flag in _SPLIT.items():
        value = model.get(field)
        if isinstance(value, Mapping):
            warnings.warn(f"{where}: model.{field} was saved without its stages: left out "
                          "(give 'pipeline_layout' beside 'config')", FlowsimWarning,
                          stacklevel=5)
        elif flag in (EMBEDDING, LOSS):
            if value is True:
                flags[flag] = None
        elif value is not None:
            flags[flag] = str(value)
    try:
        return layout_keys(flags, keys, where)
    except ConfigError as exc:   # Megatron-LM's flags named by their Megatron-Bridge paths
        paths = {f"--{flag}": f"model.{field}" for field, flag in _SPLIT.items()}
        raise ConfigError(renamed(str(exc), {**paths, "--num-layers": "model.num_layers"})
                          ) from None


#: NeMo 1's paths in the NeMo importer's messages -> Megatron-Bridge's
_PATHS = {"model.encoder_seq_length": "model.seq_length",
          "model.micro_batch_size": "train.micro_batch_size",
          "model.global_batch_size": "train.global_batch_size",
          "model.optim.overlap_param_sync": "ddp.overlap_param_gather",
          "model.optim.align_param_gather": "ddp.align_param_gather",
          "model.activations_checkpoint_granularity": "model.recompute_granularity",
          "model.activations_checkpoint_method": "model.recompute_method",
          "model.activations_checkpoint_num_layers": "model.recompute_num_layers",
          "model.ub_tp_comm_overlap": "model.tp_comm_overlap",
          "model.fp8_params": "model.fp8_param"}


def _vocabulary(model: Mapping[str, Any]) -> Any:
    """The model's vocabulary as Megatron-LM pads it: the saved ``vocab_size`` is the
    unpadded one, rounded up to ``make_vocab_size_divisible_by`` x TP when
    ``should_pad_vocab`` (``megatron/training/vocab_utils.py``); a bad value is left for the
    transformer to name."""
    vocab, step = model["vocab_size"], model.get("make_vocab_size_divisible_by", 128)
    tp = model.get("tensor_model_parallel_size", 1)
    if not model.get("should_pad_vocab") or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (vocab, step, tp)):
        return vocab
    multiple = step * tp
    return -(-vocab // multiple) * multiple


def _lora(peft: Any, where: str) -> dict[str, Any]:
    """LoRA's keys from the ``peft`` block (none without one).

    Raises
    ------
    ConfigError
        A PEFT method other than LoRA, a bad ``dim`` or an unknown target.
    """
    if not peft:
        return {}
    if not isinstance(peft, Mapping):
        raise config_error(where, "peft", "the PEFT method's block (_target_, dim, "
                           "target_modules)", peft)
    target = str(peft.get("_target_", ""))
    if target.rsplit(".", 1)[-1] != LORA:
        raise config_error(where, "peft._target_", "megatron.bridge.peft.lora.LoRA (DoRA, "
                           "canonical LoRA and other methods are not modelled)", target)
    keys = lora_keys(peft.get("dim", 32), peft.get("target_modules", list(LORA_TARGETS)),
                     where, rank_key="peft.dim", names_key="peft.target_modules",
                     layers={t: (t,) for t in LORA_TARGETS})
    keys["lora_a2a"] = config_switch(peft, where, "peft", "a2a_experimental", False)
    return keys


def saved_run_spec(mapping: Mapping[str, Any], source: str) -> dict[str, Any] | None:
    """The ``generator: megatron_bridge`` spec of a ``run_config.yaml`` given as the workload
    itself (its ``_target_`` Megatron-Bridge's ``ConfigContainer``), or ``None`` for a
    mapping that is not one.

    Raises
    ------
    ConfigError
        A mapping with ``model:`` and ``train:`` blocks but no such ``_target_`` (a saved
        config whose class line was lost), naming ``_target_``.
    """
    if str(mapping.get("_target_", "")).endswith(".ConfigContainer"):
        return {"generator": "megatron_bridge", "config": mapping}
    if {"model", "train"} <= mapping.keys():
        raise config_error(source, "_target_", "megatron.bridge.training.config."
                           "ConfigContainer, as Megatron-Bridge saves it (or a spec "
                           "'generator: megatron_bridge' with 'config:' naming the file)",
                           mapping.get("_target_"))
    return None


def parse_megatron_bridge(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: megatron_bridge``: key ``config`` (a ``run_config.yaml``), optionally
    ``overrides``, transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    documents = "document_tokens" in values
    names = {key: f"model.{name}" for name, key in NUMBERS.items()}
    names.update(sequence="model.seq_length", micro_batch="train.micro_batch_size",
                 global_batch="train.global_batch_size", vocab="model.vocab_size",
                 bucket_size="ddp.bucket_size", moe_ffn="model.moe_ffn_hidden_size",
                 expert_tp="model.expert_tensor_parallel_size",
                 pipeline_layout="model's pipeline split settings",
                 lora_rank="peft.dim", lora_targets="peft.target_modules")
    return parse_imported(values, source, read="config",
                          translate=lambda config, src: bridge_keys(config, src, overrides,
                                                                    documents=documents),
                          names=names)
