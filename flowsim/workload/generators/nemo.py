"""A NeMo training config as a transformer spec: ``generator: nemo``.

NeMo 1.x's ``megatron_gpt`` configs (the YAMLs of NeMo-Framework-Launcher and of NVIDIA's DGX
Cloud benchmarking recipes: ``trainer:`` and ``model:`` blocks) describe a run by Megatron-
Core's settings under NeMo's names. This generator reads one (key ``config``: a path, relative
to the spec file, or the mapping itself) and builds the :mod:`transformer <.transformer>`
workload it describes; the data-parallel size is what the network's NPUs leave. From YAML::

    generator: nemo
    config: llama3_70b.yaml
    vocab: 128256          # any transformer key overrides what the config says

What is read, by NeMo key (``model.`` omitted): the shape (``num_layers``, ``hidden_size``,
``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``kv_channels``,
``encoder_seq_length``, ``activation``: a ``*glu`` is a gated MLP,
``share_embeddings_and_output_weights``), the batch (``micro_batch_size``,
``global_batch_size``), the parallelism (``tensor_``, ``pipeline_``, ``context_``,
``expert_model_parallel_size``, ``virtual_pipeline_model_parallel_size``,
``sequence_parallel``), the experts (``num_moe_experts``, ``moe_router_topk``,
``moe_expert_capacity_factor``), recomputation (``activations_checkpoint_granularity``),
precision (``trainer.precision``, ``fp8``), ``ub_tp_comm_overlap`` (NeMo's userbuffers
settings) and the optimizer (``optim.name``: :data:`DISTRIBUTED_OPTIMIZERS`, with
``overlap_grad_sync`` and ``overlap_param_sync``). The vocabulary comes from
``tokenizer.type`` when it names a known model family (:data:`TOKENIZER_VOCAB`), else from a
``vocab`` key beside ``config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError, config_error
from .megatron import ImportedSpec, parse_imported

#: NeMo model key -> transformer key (numbers)
NUMBERS = {"num_layers": "layers", "hidden_size": "hidden", "ffn_hidden_size": "ffn",
           "num_attention_heads": "heads", "num_query_groups": "kv_heads",
           "kv_channels": "head_dim", "encoder_seq_length": "sequence",
           "micro_batch_size": "micro_batch", "global_batch_size": "global_batch",
           "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
           "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
           "virtual_pipeline_model_parallel_size": "vpp", "num_moe_experts": "experts",
           "moe_router_topk": "top_k", "moe_expert_capacity_factor": "capacity_factor"}
#: ``optim.name`` of NeMo's distributed optimizers (ZeRO-1: sharded states, reduce-scattered
#: gradients, all-gathered parameters)
DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")
#: vocabulary by a fragment of ``tokenizer.type`` (Hugging Face model names)
TOKENIZER_VOCAB = {"Meta-Llama-3": 128256, "Llama-3.1": 128256, "Llama-2": 32000,
                   "gpt2": 50257, "Mixtral": 32000, "Mistral-7B": 32000}


def nemo_keys(config: Any, source: str) -> dict[str, Any]:
    """The transformer keys a NeMo config (a mapping, or a path relative to ``source``'s
    folder) sets."""
    where, config = _load(config, source)
    model = config.get("model")
    if not isinstance(model, Mapping):
        raise config_error(where, "model", "NeMo's model block (a mapping)", model)
    keys: dict[str, Any] = {}
    for nemo, key in NUMBERS.items():
        value = model.get(nemo)
        if value is not None:   # null: NeMo's default, which the generator's is
            keys[key] = value
    keys["gated_mlp"] = "glu" in str(model.get("activation", "gelu"))
    keys["tied_embeddings"] = bool(model.get("share_embeddings_and_output_weights", True))
    for nemo, key in (("sequence_parallel", "sp"), ("ub_tp_comm_overlap", "tp_comm_overlap")):
        keys[key] = bool(model.get(nemo, False))
    granularity = model.get("activations_checkpoint_granularity")
    keys["recompute"] = granularity if granularity in ("selective", "full") else "none"
    precision = str((config.get("trainer") or {}).get("precision", "bf16"))
    keys["dtype"] = "fp8" if model.get("fp8") else "fp16" if precision.startswith("16") \
        else "bf16"
    # Megatron-Core's pipeline sends whole tensors (the legacy models scatter-gather them)
    keys["scatter_gather"] = not model.get("mcore_gpt", True)
    optim = model.get("optim") or {}
    if optim.get("name") in DISTRIBUTED_OPTIMIZERS:
        keys["distributed_optimizer"] = True
        keys["overlap_grad_reduce"] = bool(optim.get("overlap_grad_sync", False))
        keys["overlap_param_gather"] = bool(optim.get("overlap_param_sync", False))
    tokenizer = str((model.get("tokenizer") or {}).get("type", ""))
    for fragment, size in TOKENIZER_VOCAB.items():
        if fragment.lower() in tokenizer.lower():
            keys["vocab"] = size
            break
    return keys


def _load(config: Any, source: str) -> tuple[str, Mapping[str, Any]]:
    """The config mapping, and where it came from for messages."""
    if isinstance(config, Mapping):
        return f"{source}: config", config
    if not isinstance(config, str):
        raise config_error(source, "config", "a NeMo config: a YAML path or a mapping", config)
    import yaml

    base = Path(source).parent if Path(source).is_file() else Path.cwd()
    path = base / config
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: key 'config': cannot read {path}: "
                          f"{exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected NeMo's trainer and model blocks, found "
                          f"{type(data).__name__}")
    return str(path), data


def parse_nemo(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: nemo``: key ``config`` (a NeMo config), transformer keys."""
    return parse_imported(values, source, read="config", translate=nemo_keys)
