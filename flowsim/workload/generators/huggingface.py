"""A Hugging Face model config as a transformer's shape: ``generator: huggingface``.

A model on the Hugging Face Hub is described by its ``config.json`` (the ``transformers``
library's ``PretrainedConfig``): layers, widths, heads, vocabulary, experts. This generator
reads one (key ``config``: a path relative to the spec file, or the mapping itself) for the
model's shape; everything about the run — sequence, batch, parallelism, precision, device —
is given beside it as transformer keys, which also win over what the config says::

    generator: huggingface
    config: Meta-Llama-3-8B/config.json
    sequence: 8192
    global_batch: 128
    tp: 2
    pp: 2
    sp: true
    distributed_optimizer: true
    device: h100

The data-parallel size is what the network's NPUs leave over ``tp x pp x cp``. What is read,
by ``model_type`` (the config's own key, which decides the modules the library builds):

* **the Llama family** (``llama``, ``mistral``, ``ministral``, ``ministral3``, ``qwen2``,
  ``qwen3``, ``olmo2``, ``olmo3``, ``granite``, ``phi3``, ``gemma``, ``gemma2``,
  ``gemma3_text``, ``glm4``, ``seed_oss``, ``smollm3``, ``exaone4``, ``cohere``, ``cohere2``;
  ``nemotron``, whose MLP is plain: two GEMMs around a squared ReLU):
  ``num_hidden_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads`` (grouped-query attention), ``head_dim``
  when it is not ``hidden / heads`` (Qwen 3, Gemma), ``intermediate_size`` of a gated MLP
  (SwiGLU or GeGLU: three GEMMs), ``vocab_size``, ``tie_word_embeddings``; rotary
  embeddings; a ``sliding_window`` on the layers the library gives it: those ``layer_types``
  names ``sliding_attention`` (newer configs list every layer), else the model's own rule
  (Mistral's, Ministral's, Mixtral's, Phi-3's and Qwen3-MoE's every layer; dense Qwen's
  from ``max_window_layers`` on; Qwen's and SmolLM3's only with ``use_sliding_window``,
  SmolLM3's on its layers without rotary embeddings; Gemma 2's and GPT-OSS's every other
  one from the first; Gemma 3's, Cohere 2's and EXAONE 4's all but every
  ``sliding_window_pattern``-th (EXAONE's also a string such as ``LLLG``), OLMo 3's all but
  every fourth; the other types' modules take no window); Cohere's attention and MLP run in
  parallel and are priced one after the other; a multimodal
  config's ``text_config`` is its language model (its type, when it does not say, the
  one the library infers: :data:`TEXT_TYPES`); the settings
  :data:`.huggingface_models.LIBRARY_DEFAULTS` lists take the value ``transformers`` gives
  them when the config leaves them out (Gemma 3's published ``text_config`` gives only its
  widths and layers), and any other setting the model needs must be written (a config
  without it is refused, naming the key);
* **mixtures of experts**: Mixtral's and GPT-OSS's ``num_local_experts`` and
  ``num_experts_per_tok`` (experts of ``intermediate_size``; GPT-OSS's attention sinks are
  not priced); Qwen-MoE's ``num_experts``, ``moe_intermediate_size``,
  ``shared_expert_intermediate_size``, ``decoder_sparse_step`` and ``mlp_only_layers``;
  DeepSeek-V2 / V3's ``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``
  and multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``) and its multi-token prediction depths
  (``num_nextn_predict_layers``: ``mtp_layers``, which the run's keys can set to 0) and
  its group-limited routing (``n_group``, ``topk_group``: ``routing_groups`` and
  ``node_limit`` when the run's keys say ``dispatcher: deepep`` and no limit of their own);
  DeepSeek-V3.2 (``deepseek_v32``) as V3 whose attention reads the
  ``index_topk`` keys its indexer picks (priced as a window of that many keys; the indexer
  not priced, a warning says so); GLM-4.5's (``glm4_moe``) DeepSeek layout with
  grouped-query attention (``first_k_dense_replace`` 1 by default); OLMoE's
  ``num_experts`` of ``intermediate_size``; Phi-3.5-MoE's and Granite-MoE's Mixtral keys,
  Granite-MoE-Shared's ``shared_intermediate_size``; ERNIE 4.5's ``moe_num_experts``,
  ``moe_k``, ``moe_num_shared_experts`` and its mixture layers from
  ``moe_layer_start_index`` every ``moe_layer_interval``-th; Hunyuan-MoE's ``num_experts``
  and ``moe_topk`` (per-layer lists of one value too) with one shared MLP, all
  ``intermediate_size`` wide; Llama 4's (``llama4_text``, in a ``llama4`` config's
  ``text_config``) ``num_local_experts`` and one shared expert of ``intermediate_size``
  on ``moe_layers`` or every ``interleave_moe_layer_step``-th layer, its dense layers
  ``intermediate_size_mlp`` wide, and its chunked attention (``attention_chunk_size``, on
  the layers with rotary embeddings) priced, once the sequence is longer than a chunk, as
  the sliding window whose queries attend as many keys on average (:func:`chunk_window`);
  DBRX (``dbrx``: ``n_layers``, ``d_model``, ``n_heads``, ``attn_config.kv_n_heads``,
  ``ffn_config``'s ``moe_num_experts``, ``moe_top_k`` and ``ffn_hidden_size``);
* **the GPT family**: ``gpt2`` (``n_layer``, ``n_embd``, ``n_head``, ``n_inner``: learned
  positions, tied embeddings), ``opt`` (``ffn_dim``; OPT-350m's embedding projection is
  left out), ``gpt_neox`` (rotary), ``bloom`` (ALiBi; ``n_embed`` or ``hidden_size``,
  ``n_head`` or ``num_attention_heads``; its MLP always 4 x hidden), ``falcon`` (rotary
  or ALiBi; ``num_kv_heads`` with the new decoder architecture, one key-value head with
  ``multi_query``; ``ffn_hidden_size`` or 4 x hidden; attention and MLP in parallel are
  priced one after the other), ``phi`` (Phi-1/2: ``num_key_value_heads``) and
  ``starcoder2`` (its ``sliding_window`` on every layer), each with a plain two-GEMM MLP;
* **Nemotron-H and Nemotron 3** (``nemotron_h``, :mod:`.huggingface_hybrid`): the layers of
  ``hybrid_override_pattern`` (Mamba-2 mixers, attention, squared-ReLU MLPs and experts),
  ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``,
  ``conv_kernel``, ``chunk_size``; ``n_routed_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size`` and ``moe_shared_expert_intermediate_size`` where the pattern
  has experts; no position embedding.

The rules are those of ``transformers`` 5.24 (and 4.56, which differs only in Qwen2-MoE's
windows, where 4.56's rule is kept); DeepSeek's MoE layers follow its own code (every
``moe_layer_freq``-th layer after the first ``first_k_dense_replace``), which the library
agrees with for every published config.

``config`` may also name a model folder (``config.json`` inside it) or a Hub id
(``meta-llama/Llama-3.1-8B``) the local Hugging Face cache holds (:mod:`.huggingface_hub`;
nothing is downloaded).

Models bundled with flowsim (``workloads/models/``: the architecture keys of their published
configs) are named without a path: ``config: llama3_8b``, ``llama3_70b``, ``llama31_405b``,
``mixtral_8x7b``, ``qwen3_30b_a3b``, ``qwen3_235b_a22b``, ``deepseek_v3``,
``llama4_maverick``, ``nemotron3_nano``.

Another ``model_type`` is one error naming it; its shape can then be given as transformer keys
with ``generator: transformer``. Models whose layers are not all attention (state-space,
linear-attention and convolution hybrids: ``qwen3_next``, ``minimax``, ``jamba``,
``falcon_h1``, ``mamba`` and others, :data:`.huggingface_models.HYBRID`)
are refused with what their other layers are.

``torch_dtype`` is the checkpoint's storage type, not the run's precision, and is not read
(``dtype`` defaults to BF16; give it beside ``config``).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import ConfigError, FlowsimWarning, config_error
from .huggingface_experts import EXPERTS, dbrx_keys, routing_groups_keys
from .huggingface_hub import model_config_path
from .huggingface_hybrid import nemotron_h_keys
from .huggingface_models import (
    GPT_LIKE,
    HYBRID,
    LIBRARY_DEFAULTS,
    LLAMA_LIKE,
    Reader,
    Rules,
    gpt_keys,
    llama_keys,
)
from .imported import ImportedSpec, parse_imported, read_beside, spec_folder

#: multimodal model type -> the type of its ``text_config`` when that does not say
TEXT_TYPES = {"llama4": "llama4_text", "gemma3": "gemma3_text", "mistral3": "mistral"}


def parse_huggingface(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: huggingface``: key ``config`` (a Hugging Face ``config.json``: a path
    relative to the spec file, a model folder, a Hub id in the local cache, a bundled
    model's name, or the mapping) and transformer keys, which win."""
    rules: list[Rules] = []
    names: dict[str, str] = {}   # the config's name of each key, once it is read

    def translate(config: Any, src: str) -> dict[str, Any]:
        keys, found, read_names = _read_model(config, src)
        rules.append(found)
        names.update(read_names)
        # the window stays until the final layer count says whether a layer has it
        return _laid_out(keys, found, keys["layers"], final=False)

    def finish(keys: dict[str, Any]) -> dict[str, Any]:
        # the per-layer patterns follow the layer count a key beside the config may change
        return _laid_out(keys, rules[0], keys["layers"], source=source)

    spec = parse_imported(values, source, read="config", translate=translate, names=names,
                          finish=finish)
    # keys the final layout adds (the routing groups under DeepEP) keep their config's names
    known = dict(spec.names)
    late = tuple((k, v) for k, v in names.items() if k not in known and k not in values)
    return replace(spec, names=spec.names + late)


def huggingface_keys(config: Any, source: str) -> dict[str, Any]:
    """The transformer keys of the model a Hugging Face config describes (a mapping, or a
    JSON file relative to ``source``'s folder).

    Raises
    ------
    ConfigError
        The file cannot be read or is not a JSON object; its ``model_type`` is not one this
        module reads; a setting the model needs is missing or not a positive integer.
    """
    keys, rules, _ = _read_model(config, source)
    return _laid_out(keys, rules, keys["layers"])


def _read_model(config: Any, source: str) -> tuple[dict[str, Any], Rules, dict[str, str]]:
    """The model's keys, its per-layer rules and the config's name of each key read."""
    where, data = _load(config, source)
    if data.get("text_config") is not None and not isinstance(data["text_config"], Mapping):
        raise config_error(where, "text_config", "the language model's config (a mapping)",
                           data["text_config"])
    if isinstance(data.get("text_config"), Mapping):   # a multimodal model's language model
        parent = data.get("model_type")
        where, data = f"{where}: text_config", data["text_config"]
        if "model_type" not in data and isinstance(parent, str) and parent in TEXT_TYPES:
            data = {**data, "model_type": TEXT_TYPES[parent]}
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise config_error(where, "model_type", "the model's type (a string: "
                           "transformers builds the model it names)", model_type)
    if model_type == "llama4" and "text_config" not in data:   # a text config named so
        model_type = "llama4_text"
    data = {**LIBRARY_DEFAULTS.get(model_type, {}), **data}
    read = Reader(data, where)
    if model_type in GPT_LIKE:
        return gpt_keys(read, model_type), {}, read.names
    if model_type == "dbrx":
        return (*dbrx_keys(read), read.names)
    if model_type == "nemotron_h":
        return nemotron_h_keys(read), {}, read.names
    if model_type in HYBRID:
        raise config_error(where, "model_type", "a model of attention layers (those of "
                           f"{model_type} include {HYBRID[model_type]}, which flowsim does "
                           "not price; give its attention layers' shape with generator: "
                           "transformer)", model_type)
    if model_type in LLAMA_LIKE:
        keys, rules = llama_keys(read, model_type)
        if model_type in EXPERTS:
            more, rule = EXPERTS[model_type](read)
            keys, rules = {**keys, **more}, {**rules, **rule}
        return keys, rules, read.names
    known = ", ".join([*LLAMA_LIKE, "dbrx", *GPT_LIKE, "nemotron_h"])
    raise config_error(where, "model_type", f"one of {known} (another model's shape: "
                       "generator: transformer with its keys)", model_type)


def _laid_out(keys: dict[str, Any], rules: Rules, layers: Any, *, final: bool = True,
              source: str = "") -> dict[str, Any]:
    """``keys`` with the patterns of ``rules`` over ``layers`` layers: a pattern of one kind
    of layer is no pattern (every layer a mixture of experts; the window everywhere, or
    nowhere: dropped once ``final``); chunked attention once the sequence is known."""
    out = routing_groups_keys(keys) if final else dict(keys)
    out.pop("moe_layer_freq", None)
    out.pop("window_skip_freq", None)
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= 10**6:
        return out   # the transformer refuses it, naming the key (or its graph's size)
    if "moe_layer_freq" in rules and 0 in (moe := rules["moe_layer_freq"](layers)):
        out["moe_layer_freq"] = moe
    if "window_skip_freq" in rules and out.get("window", 1):   # (window 0 beside: none)
        window = rules["window_skip_freq"](layers)
        if 1 not in window and final:
            out.pop("window", None)
        elif 0 in window and 1 in window:
            out["window_skip_freq"] = window
    sequence = keys.get("sequence")
    if "chunked" in rules and isinstance(sequence, int) and "window" not in keys:
        chunks = rules["chunked"](layers)
        if max(chunks) and sequence > max(chunks):   # chunks shorter than the sequence
            if keys.get("cp", 1) != 1 or keys.get("attention") == "unfused":
                warnings.warn(f"{source}: attention_chunk_size: chunked attention with "
                              "context parallelism or unfused attention is priced as full "
                              "causal attention (flowsim models windows with neither)",
                              FlowsimWarning, stacklevel=5)
                return out
            out["window"] = chunk_window(sequence, max(chunks))
            if 0 in chunks:
                out["window_skip_freq"] = [int(c > 0) for c in chunks]
    return out


def chunk_window(sequence: int, chunk: int) -> int:
    """The sliding window whose queries attend as many keys on average as under chunked
    causal attention (Llama 4: each query attends the earlier keys of its own chunk).

    Parameters
    ----------
    sequence : int
        Tokens per sequence, ``s = n c + r``.
    chunk : int
        Tokens per chunk, ``c``.

    Returns
    -------
    int
        The window ``w`` whose average keys per query, ``w - w^2 / 2s``
        (:attr:`~flowsim.workload.kernels.Attention.window_keys`), equal the chunks'
        ``(n c(c+1)/2 + r(r+1)/2) / s``; at least 1, at most ``sequence``.
    """
    full, rest = divmod(sequence, chunk)
    mean = (full * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2) / sequence
    return max(1, round(sequence - math.sqrt(max(0.0, sequence * sequence - 2 * sequence * mean))))


def _load(config: Any, source: str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(config, Mapping):
        return f"{source}: config", config
    found = _bundled_model(config, source)
    if found is None and isinstance(config, str) and config:   # a model folder or Hub id
        found = model_config_path(config, spec_folder(source), source)
    if found is not None:
        path, text = found, found.read_text()
    else:
        path, text = read_beside(config, source, "config", "a Hugging Face config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a JSON object (a model config), found "
                          f"{type(data).__name__}")
    return str(path), data


def _bundled_model(name: Any, source: str) -> Path | None:
    """The bundled model config a bare name (no folder, no extension) stands for, unless a
    file of that name sits beside the spec; None for anything else."""
    if not isinstance(name, str) or not name or Path(name).name != name or Path(name).suffix:
        return None
    if (spec_folder(source) / name).exists():
        return None
    from ...resources import bundled_dir, bundled_names

    path = bundled_dir("model") / f"{name}.json"
    if path.is_file():
        return path
    raise config_error(source, "config", "a Hugging Face config.json (a path relative to the "
                       "spec) or a bundled model: " + ", ".join(bundled_names("model")), name)
