"""An LLM Foundry training YAML as a transformer spec: ``generator: llmfoundry``.

MosaicML's LLM Foundry (``scripts/train/train.py``, run by Composer with PyTorch FSDP) describes
a run by one YAML: the model (``model:``, an MPT with ``name: mpt_causal_lm``), the batch
(``global_train_batch_size``, ``device_train_microbatch_size``), the precision and the FSDP
settings (``fsdp_config:``). This generator reads one (key ``config``: a path, relative to the
spec file, or the mapping itself), after OmegaConf's command-line items (``overrides``:
``key=value``, as ``composer train.py run.yaml key=value`` takes them), and builds the
:mod:`transformer <.transformer>` workload it describes; the data-parallel size is what the
network's NPUs leave, as Composer's launcher decides it. From YAML::

    generator: llmfoundry
    config: mpt-7b.yaml
    overrides: global_train_batch_size=96 device_train_microbatch_size=6
    device: a100          # any transformer key overrides what the config says

What is read, with MPT's defaults (``llmfoundry/models/mpt/configuration_mpt.py`` and
``llmfoundry/models/utils/config_defaults.py``) where a key is absent: ``d_model``,
``n_heads``, ``n_layers``, ``expansion_ratio`` (or ``ffn_config.ffn_hidden_size``),
``max_seq_len``, ``vocab_size``, ``learned_pos_emb``, ``tie_word_embeddings``,
``loss_fn`` (``fused_crossentropy``, flash-attn's kernel, or ``torch_crossentropy``, priced
as Megatron-Core's unfused steps), ``use_train_metrics`` (two cross entropies more per
micro-batch, :data:`TRAIN_METRICS`),
``attn_config`` (``attn_type`` with ``kv_n_heads`` for grouped-query and multi-query attention,
``attn_impl``: ``flash`` and ``triton`` are flash kernels priced at FlashAttention-2's rate,
``torch`` unfused; ``alibi``, ``rope``, ``sliding_window_size``) and ``ffn_config.ffn_type``
(``mptglu``: a gated MLP); ``precision`` (``amp_bf16``, ``amp_fp16``, ``amp_fp8``);
``fsdp_config`` (``sharding_strategy``: ``FULL_SHARD`` and ``HYBRID_SHARD`` shard parameters,
gradients and optimizer states, ``SHARD_GRAD_OP`` gradients and optimizer states,
``NO_SHARD`` nothing, as no ``fsdp_config`` at all (PyTorch's DDP); ``mixed_precision``
``PURE`` reduces gradients in 16 bits, ``DEFAULT`` and ``FULL`` in FP32;
``activation_checkpointing``: every block recomputed). Interpolations
(``${max_seq_len}``, ``${variables.max_seq_len}``) are resolved against the config's own
scalars. ``device_train_microbatch_size: auto`` (Composer's search for the largest micro-batch
that fits) is one error asking for ``micro_batch`` beside ``config``; a model other than an
MPT (``hf_causal_lm``) is one error asking for its shape beside ``config``; newer LLM
Foundry's tensor parallelism (``tp_config``) is named in a warning asking for ``tp``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

from ..._validate import as_bool, as_int, as_number
from ...errors import FlowsimWarning, config_error
from .config_files import apply_overrides, config_block, load_config
from .imported import ImportedSpec, parse_imported

#: MPT's model keys -> transformer keys (numbers), and MPT's defaults
NUMBERS = {"n_layers": ("layers", 24), "d_model": ("hidden", 2048), "n_heads": ("heads", 16),
           "max_seq_len": ("sequence", 2048), "vocab_size": ("vocab", 50368)}
#: ``fsdp_config.sharding_strategy`` -> (fsdp, distributed optimizer)
SHARDING = {"FULL_SHARD": (True, False), "HYBRID_SHARD": (True, False),
            "SHARD_GRAD_OP": (False, True), "NO_SHARD": (False, False)}
#: ``precision`` -> the transformer's ``dtype``
PRECISION = {"amp_bf16": "bf16", "amp_fp16": "fp16", "amp_fp8": "fp8", "bf16": "bf16",
             "fp16": "fp16"}
#: ``attn_config.attn_impl`` -> the transformer's ``attention``
ATTENTION = {"flash": "flash2", "triton": "flash2", "torch": "unfused"}
#: ``model.loss_fn`` -> the transformer's cross entropy: flash-attn's fused kernel (LLM
#: Foundry's default), or PyTorch's, priced as Megatron-Core's unfused steps
LOSSES: dict[str, dict[str, Any]] = {
    "fused_crossentropy": {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "flash_attn"},
    "torch_crossentropy": {"cross_entropy_fusion": False}}
#: the cross entropies the MPT's training metrics compute each micro-batch (LLM Foundry
#: v0.3's ``ComposerMPTCausalLM``: ``LanguageCrossEntropy`` and ``LanguagePerplexity``, each
#: its own; Composer updates them after every micro-batch's backward)
TRAIN_METRICS = 2
_REFERENCE = re.compile(r"^\$\{([\w.]+)\}$")


def llmfoundry_keys(config: Any, source: str, overrides: Any = None, *,
                    beside: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The transformer keys an LLM Foundry config (a mapping, or a path relative to
    ``source``'s folder) sets, after OmegaConf's command-line ``overrides``
    (``beside``: the transformer keys given beside it, which win over what it says)."""
    where, config = load_config(config, source, what="an LLM Foundry YAML: a path or a mapping",
                                expected="an LLM Foundry training config (model:, fsdp_config:)")
    config = apply_overrides(config, overrides, source, example="global_train_batch_size=64")
    model = config_block(config, "model", where, what="the MPT model's settings")
    name = _value(config, model, "name", where, "model.name", "mpt_causal_lm")
    if name != "mpt_causal_lm":
        raise config_error(where, "model.name", "mpt_causal_lm (another model's shape is not "
                           "in the config: give layers, hidden, heads, ffn and vocab beside "
                           "'config')", name)
    keys: dict[str, Any] = {}
    for key, (target, default) in NUMBERS.items():
        keys[target] = _value(config, model, key, where, f"model.{key}", default)
    attn = config_block(model, "attn_config", where, what="MPT's attention settings")
    ffn = config_block(model, "ffn_config", where, what="MPT's MLP settings")
    # the MLP's width is computed here, so its operands are checked here
    hidden = keys["hidden"] = as_int(keys["hidden"], source=where, key="model.d_model",
                                     minimum=1)
    ratio = as_number(_value(config, model, "expansion_ratio", where, "model.expansion_ratio",
                             4), source=where, key="model.expansion_ratio", positive=True)
    keys["ffn"] = _value(config, ffn, "ffn_hidden_size", where, "model.ffn_config."
                         "ffn_hidden_size", None) or int(hidden * ratio)
    keys["gated_mlp"] = _value(config, ffn, "ffn_type", where, "model.ffn_config.ffn_type",
                               "mptmlp") == "mptglu"
    kind = _value(config, attn, "attn_type", where, "model.attn_config.attn_type",
                  "multihead_attention")
    if kind == "grouped_query_attention":   # LLM Foundry has no default for it either
        keys["kv_heads"] = _value(config, attn, "kv_n_heads", where,
                                  "model.attn_config.kv_n_heads", None)
        if keys["kv_heads"] is None:
            raise config_error(where, "model.attn_config.kv_n_heads", "the key-value heads "
                               "of grouped_query_attention", None)
    elif kind == "multiquery_attention":
        keys["kv_heads"] = 1
    impl = _value(config, attn, "attn_impl", where, "model.attn_config.attn_impl", "flash")
    if not _one_of(impl, ATTENTION):
        raise config_error(where, "model.attn_config.attn_impl", "flash, triton or torch", impl)
    keys["attention"] = ATTENTION[impl]
    window = _value(config, attn, "sliding_window_size", where,
                    "model.attn_config.sliding_window_size", -1)
    if isinstance(window, int) and window > 0:
        keys["window"] = window
    flag = _switch(config, where)
    keys["position_embedding"] = (
        "alibi" if flag(attn, "alibi", "model.attn_config.alibi", False)
        else "rope" if flag(attn, "rope", "model.attn_config.rope", False)
        else "learned_absolute" if flag(model, "learned_pos_emb", "model.learned_pos_emb", True)
        else "none")
    keys["tied_embeddings"] = flag(model, "tie_word_embeddings", "model.tie_word_embeddings",
                                   True)
    loss = _value(config, model, "loss_fn", where, "model.loss_fn", "fused_crossentropy")
    if not _one_of(loss, LOSSES):
        raise config_error(where, "model.loss_fn", " or ".join(LOSSES), loss)
    keys.update(LOSSES[loss])
    if flag(model, "use_train_metrics", "model.use_train_metrics", True):
        keys["metric_cross_entropies"] = TRAIN_METRICS
    if config.get("tp_config") is not None:   # newer LLM Foundry's tensor parallelism
        warnings.warn(f"{where}: tp_config (tensor parallelism) is not read: give 'tp' (and "
                      "'sp') beside 'config'", FlowsimWarning, stacklevel=4)
    keys.update(_batch_and_precision(config, where, beside))
    keys.update(_sharding(config, where, flag, beside))
    return keys


def _batch_and_precision(config: Mapping[str, Any], where: str, beside: frozenset[str]
                         ) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    batch = _value(config, config, "global_train_batch_size", where, "global_train_batch_size",
                   None)
    if batch is not None:
        keys["global_batch"] = batch
    micro = _value(config, config, "device_train_microbatch_size", where,
                   "device_train_microbatch_size", 1)
    if micro == "auto" and "micro_batch" not in beside:
        raise config_error(where, "device_train_microbatch_size", "a number (auto: Composer "
                           "searches for the largest micro-batch that fits; give the one it "
                           "found as 'micro_batch' beside 'config')", micro)
    keys["micro_batch"] = micro
    precision = _value(config, config, "precision", where, "precision", "amp_bf16")
    if precision == "fp32":
        warnings.warn(f"{where}: precision fp32: FP32 training is not modelled; priced as BF16",
                      FlowsimWarning, stacklevel=4)
        precision = "amp_bf16"
    if not _one_of(precision, PRECISION):
        raise config_error(where, "precision", ", ".join(PRECISION) + " or fp32", precision)
    keys["dtype"] = PRECISION[precision]
    return keys


def _sharding(config: Mapping[str, Any], where: str, flag, beside: frozenset[str]
              ) -> dict[str, Any]:
    """FSDP's settings: what is sharded, the gradients' reduction type, recomputation.
    Without ``fsdp_config`` LLM Foundry trains with PyTorch's DDP: FP32 gradients all-reduced
    in overlapped buckets, nothing sharded, nothing recomputed."""
    if config.get("fsdp_config") is None:
        return {"fsdp": False, "distributed_optimizer": False, "grad_reduce_in_bf16": False,
                "overlap_grad_reduce": True, "overlap_param_gather": False,
                "recompute": "none"}
    fsdp = config_block(config, "fsdp_config", where, what="Composer's FSDP settings")
    strategy = _value(config, fsdp, "sharding_strategy", where,
                      "fsdp_config.sharding_strategy", "FULL_SHARD")
    if not _one_of(strategy, SHARDING):
        raise config_error(where, "fsdp_config.sharding_strategy", ", ".join(SHARDING),
                           strategy)
    if strategy == "HYBRID_SHARD" and "fsdp_shard" not in beside:
        warnings.warn(f"{where}: fsdp_config.sharding_strategy HYBRID_SHARD shards within a "
                      "node: give 'fsdp_shard' (the GPUs of a node) beside 'config', else every "
                      "data-parallel rank shares the shards", FlowsimWarning, stacklevel=4)
    keys: dict[str, Any] = {}
    keys["fsdp"], keys["distributed_optimizer"] = SHARDING[strategy]
    if keys["fsdp"]:   # Composer wraps the model in PyTorch's FSDP1
        keys["fsdp_impl"] = "fsdp1"
    mixed = _value(config, fsdp, "mixed_precision", where, "fsdp_config.mixed_precision",
                   "DEFAULT")
    if mixed not in ("PURE", "DEFAULT", "FULL"):
        raise config_error(where, "fsdp_config.mixed_precision", "PURE, DEFAULT or FULL", mixed)
    keys["grad_reduce_in_bf16"] = mixed == "PURE"
    keys["overlap_grad_reduce"] = keys["overlap_param_gather"] = True
    checkpointing = flag(fsdp, "activation_checkpointing",
                         "fsdp_config.activation_checkpointing", False)
    keys["recompute"] = "full" if checkpointing else "none"
    return keys


def _one_of(value: Any, names: Mapping[str, Any]) -> bool:
    """Whether ``value`` is one of ``names`` (a list or mapping read from YAML is not)."""
    return isinstance(value, str) and value in names


def _value(config: Mapping[str, Any], block: Mapping[str, Any], key: str, where: str,
           name: str, default: Any) -> Any:
    """``block[key]`` with an OmegaConf reference (``${a.b}``) resolved against ``config``;
    absent or null: ``default``."""
    value = block.get(key)
    for _ in range(8):   # a reference to a reference, within reason
        match = _REFERENCE.match(value) if isinstance(value, str) else None
        if match is None:
            break
        target: Any = config
        for part in match.group(1).split("."):
            target = target.get(part) if isinstance(target, Mapping) else None
        if target is None:
            raise config_error(where, name, "a value or a reference to one of the config's "
                               "own keys", value)
        value = target
    return default if value is None else value


def _switch(config: Mapping[str, Any], where: str):
    """A reader of true/false settings (anything else: one error naming it)."""
    def read(block: Mapping[str, Any], key: str, name: str, default: bool) -> bool:
        value = _value(config, block, key, where, name, default)
        return as_bool(value, source=where, key=name)
    return read


def parse_llmfoundry(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: llmfoundry``: key ``config`` (an LLM Foundry training YAML), optionally
    ``overrides`` (OmegaConf's command-line items), transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    names = {target: f"model.{key}" for key, (target, _) in NUMBERS.items()}
    names.update(global_batch="global_train_batch_size",
                 micro_batch="device_train_microbatch_size", ffn="model.expansion_ratio",
                 kv_heads="model.attn_config.kv_n_heads",
                 window="model.attn_config.sliding_window_size")
    return parse_imported(values, source, read="config",
                          translate=lambda config, src: llmfoundry_keys(
                              config, src, overrides, beside=frozenset(values) - {"config"}),
                          names=names)
