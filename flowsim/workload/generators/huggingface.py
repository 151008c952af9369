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

* **the Llama family** (``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``olmo2``, ``granite``,
  ``phi3``, ``gemma``, ``gemma2``, ``gemma3_text``): ``num_hidden_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads`` (grouped-query attention), ``head_dim``
  when it is not ``hidden / heads`` (Qwen 3, Gemma), ``intermediate_size`` of a gated MLP
  (SwiGLU or GeGLU: three GEMMs), ``vocab_size``, ``tie_word_embeddings``; rotary
  embeddings; a ``sliding_window`` on the layers the library gives it: those ``layer_types``
  names ``sliding_attention`` (newer configs list every layer), else the model's own rule
  (Mistral's, Mixtral's, Phi-3's and Qwen3-MoE's every layer; dense Qwen's from
  ``max_window_layers`` on; Qwen's only with ``use_sliding_window``; Gemma 2's and
  GPT-OSS's every other one from the first; Gemma 3's all but every
  ``sliding_window_pattern``-th; the other types' modules take no window); a multimodal
  config's ``text_config`` is its language model; a key the config leaves out takes the
  value ``transformers`` gives it (:data:`.huggingface_models.LIBRARY_DEFAULTS`: Gemma 3's published
  ``text_config`` gives only its widths and layers);
* **mixtures of experts**: Mixtral's and GPT-OSS's ``num_local_experts`` and
  ``num_experts_per_tok`` (experts of ``intermediate_size``; GPT-OSS's attention sinks are
  not priced); Qwen-MoE's ``num_experts``, ``moe_intermediate_size``,
  ``shared_expert_intermediate_size``, ``decoder_sparse_step`` and ``mlp_only_layers``;
  DeepSeek-V2 / V3's ``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``
  and multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``); its multi-token prediction layers are not priced
  (a warning says so);
* **the GPT family**: ``gpt2`` (``n_layer``, ``n_embd``, ``n_head``, ``n_inner``: learned
  positions, tied embeddings), ``opt`` (``ffn_dim``; OPT-350m's embedding projection is
  left out), ``gpt_neox`` (rotary), ``bloom`` (ALiBi; ``n_embed`` or ``hidden_size``,
  ``n_head`` or ``num_attention_heads``; its MLP always 4 x hidden), ``falcon`` (rotary
  or ALiBi; ``num_kv_heads`` with the new decoder architecture, one key-value head with
  ``multi_query``; ``ffn_hidden_size`` or 4 x hidden; attention and MLP in parallel are
  priced one after the other), ``phi`` (Phi-1/2: ``num_key_value_heads``) and
  ``starcoder2`` (its ``sliding_window`` on every layer), each with a plain two-GEMM MLP.

The rules are those of ``transformers`` 5.24 (and 4.56, which differs only in Qwen2-MoE's
windows, where 4.56's rule is kept); DeepSeek's MoE layers follow its own code (every
``moe_layer_freq``-th layer after the first ``first_k_dense_replace``), which the library
agrees with for every published config.

Models bundled with flowsim (``workloads/models/``: the architecture keys of their published
configs) are named without a path: ``config: llama3_8b``, ``llama3_70b``, ``llama31_405b``,
``mixtral_8x7b``, ``qwen3_30b_a3b``, ``qwen3_235b_a22b``, ``deepseek_v3``.

Another ``model_type`` is one error naming it; its shape can then be given as transformer keys
with ``generator: transformer``. ``torch_dtype`` is the checkpoint's storage type, not the
run's precision, and is not read (``dtype`` defaults to BF16; give it beside ``config``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError, config_error
from .huggingface_models import (
    EXPERTS,
    GPT_LIKE,
    LIBRARY_DEFAULTS,
    LLAMA_LIKE,
    Reader,
    Rules,
    gpt_keys,
    llama_keys,
)
from .imported import ImportedSpec, parse_imported, read_beside, spec_folder

#: transformer key -> the config's name of it, for messages (the Llama family's names; a
#: family's own in :data:`FAMILY_NAMES`)
NAMES = {"layers": "num_hidden_layers", "hidden": "hidden_size",
         "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
         "head_dim": "head_dim", "ffn": "intermediate_size", "vocab": "vocab_size",
         "window": "sliding_window", "window_skip_freq": "layer_types"}
FAMILY_NAMES = {
    "mixtral": {"experts": "num_local_experts", "top_k": "num_experts_per_tok",
                "moe_ffn": "intermediate_size"},
    "qwen_moe": {"experts": "num_experts", "top_k": "num_experts_per_tok",
                 "moe_ffn": "moe_intermediate_size",
                 "shared_ffn": "shared_expert_intermediate_size",
                 "moe_layer_freq": "decoder_sparse_step and mlp_only_layers"},
    "deepseek": {"experts": "n_routed_experts", "top_k": "num_experts_per_tok",
                 "moe_ffn": "moe_intermediate_size", "shared_ffn": "n_shared_experts",
                 "moe_layer_freq": "first_k_dense_replace and moe_layer_freq",
                 "mla": "q_lora_rank, kv_lora_rank and the head dimensions"},
}


def parse_huggingface(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: huggingface``: key ``config`` (a Hugging Face ``config.json``: a path
    relative to the spec file, or the mapping) and transformer keys, which win."""
    rules: list[Rules] = []
    names = dict(NAMES)   # completed with the family's names once the config is read

    def translate(config: Any, src: str) -> dict[str, Any]:
        keys, found, family = _read_model(config, src)
        rules.append(found)
        names.update(_family_names(family))
        return _laid_out(keys, found, keys["layers"])

    def finish(keys: dict[str, Any]) -> dict[str, Any]:
        # the per-layer patterns follow the layer count a key beside the config may change
        return _laid_out(keys, rules[0], keys["layers"])

    return parse_imported(values, source, read="config", translate=translate, names=names,
                          finish=finish)


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


def _family_names(family: str) -> dict[str, str]:
    """The config's names of the keys ``family`` reads differently from Llama's."""
    names = dict(FAMILY_NAMES.get(family, {}))
    if family in GPT_LIKE:
        names.update({key: " or ".join(held) for key, held in GPT_LIKE[family][0].items()})
    return names


def _read_model(config: Any, source: str) -> tuple[dict[str, Any], Rules, str]:
    """The model's keys, its per-layer rules and its family (a GPT model type, ``mixtral``,
    ``qwen_moe``, ``deepseek`` or ``""``: the names its settings have)."""
    where, data = _load(config, source)
    if isinstance(data.get("text_config"), Mapping):   # a multimodal model's language model
        where, data = f"{where}: text_config", data["text_config"]
    model_type = data.get("model_type")
    if isinstance(model_type, str):
        data = {**LIBRARY_DEFAULTS.get(model_type, {}), **data}
    read = Reader(data, where)
    if model_type in GPT_LIKE:
        return gpt_keys(read, model_type), {}, model_type
    if model_type in LLAMA_LIKE:
        keys, rules = llama_keys(read, model_type)
        if model_type not in EXPERTS:
            return keys, rules, ""
        family, experts = EXPERTS[model_type]
        more, rule = experts(read)
        return {**keys, **more}, {**rules, **rule}, family
    known = ", ".join([*LLAMA_LIKE, *GPT_LIKE])
    raise config_error(where, "model_type", f"one of {known} (another model's shape: "
                       "generator: transformer with its keys)", model_type)


def _laid_out(keys: dict[str, Any], rules: Rules, layers: Any) -> dict[str, Any]:
    """``keys`` with the patterns of ``rules`` over ``layers`` layers: a pattern of one kind
    of layer is no pattern (every layer a mixture of experts; the window everywhere, or
    nowhere)."""
    out = dict(keys)
    out.pop("moe_layer_freq", None)
    out.pop("window_skip_freq", None)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        return out   # the transformer refuses it, naming the key
    if "moe_layer_freq" in rules and 0 in (moe := rules["moe_layer_freq"](layers)):
        out["moe_layer_freq"] = moe
    if "window_skip_freq" in rules:
        window = rules["window_skip_freq"](layers)
        if 1 not in window:
            out.pop("window", None)
        elif 0 in window:
            out["window_skip_freq"] = window
    return out


def _load(config: Any, source: str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(config, Mapping):
        return f"{source}: config", config
    bundled = _bundled_model(config, source)
    if bundled is not None:
        path, text = bundled, bundled.read_text()
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
