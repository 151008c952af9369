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
  value ``transformers`` gives it (:data:`LIBRARY_DEFAULTS`: Gemma 3's published
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
  ``n_head`` or ``num_attention_heads``; its MLP always 4 x hidden), each with a plain
  two-GEMM MLP.

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
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError, FlowsimWarning, config_error
from .imported import ImportedSpec, parse_imported, read_beside

#: model types whose blocks are Llama's (gated MLP, rotary embeddings), and whether their
#: configs tie the output layer to the embedding when they do not say
LLAMA_LIKE = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False,
              "olmo2": False, "granite": False, "phi3": False, "mixtral": False,
              "qwen2_moe": False, "qwen3_moe": False, "deepseek_v2": False,
              "deepseek_v3": False, "gemma": True, "gemma2": True, "gemma3_text": True,
              "gpt_oss": False}
#: model types whose attention takes ``sliding_window`` (Qwen's only with
#: ``use_sliding_window``); the others' modules ignore the key
WINDOW_TYPES = ("mistral", "mixtral", "phi3", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe",
                "gemma2", "gemma3_text", "gpt_oss")
#: model types whose sliding-window layers alternate with full ones, the first one windowed
ALTERNATING = ("gemma2", "gpt_oss")
#: what ``transformers`` takes for a key a config leaves out (its configuration classes'
#: defaults, transformers 5.24 and 4.56; where they differ from "heads for key-value heads,
#: hidden / heads for the head width, no window"): a published config may leave them out
#: (Gemma 3's ``text_config`` gives only its widths and layers)
LIBRARY_DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "mixtral": {"num_key_value_heads": 8},
    "qwen2": {"num_key_value_heads": 32},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128},
    "qwen2_moe": {"num_key_value_heads": 16, "shared_expert_intermediate_size": 5632},
    "qwen3_moe": {"num_key_value_heads": 4},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256},
    "gemma2": {"num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096},
    "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "vocab_size": 262208, "sliding_window": 4096},
    "gpt_oss": {"num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128},
    "deepseek_v2": {"n_shared_experts": 2, "q_lora_rank": 1536},
    "deepseek_v3": {"num_key_value_heads": 128, "n_shared_experts": 1,
                    "first_k_dense_replace": 3, "q_lora_rank": 1536},
}
#: the attention kinds of ``layer_types`` a dense transformer has (1: the sliding window)
LAYER_TYPES = {"sliding_attention": 1, "full_attention": 0}
#: the GPT family: (config key of each transformer key), position embedding, tied default
#: (a key's names, the first one a config holds is read; no ``ffn`` name: 4 x hidden)
GPT_LIKE: dict[str, tuple[dict[str, tuple[str, ...]], str, bool]] = {
    "gpt2": ({"layers": ("n_layer",), "hidden": ("n_embd",), "heads": ("n_head",),
              "ffn": ("n_inner",)}, "learned_absolute", True),
    "opt": ({"layers": ("num_hidden_layers",), "hidden": ("hidden_size",),
             "heads": ("num_attention_heads",), "ffn": ("ffn_dim",)}, "learned_absolute",
            True),
    "gpt_neox": ({"layers": ("num_hidden_layers",), "hidden": ("hidden_size",),
                  "heads": ("num_attention_heads",), "ffn": ("intermediate_size",)}, "rope",
                 False),
    # BloomConfig's attribute map; BloomMLP is always 4 x hidden
    "bloom": ({"layers": ("n_layer", "num_hidden_layers"), "hidden": ("hidden_size", "n_embed"),
               "heads": ("n_head", "num_attention_heads")}, "alibi", True),
}
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


#: per-layer patterns as rules of the layer count: key -> (layers -> 1 or 0 per layer)
Rules = dict[str, Callable[[int], list[int]]]


def _read_model(config: Any, source: str) -> tuple[dict[str, Any], Rules, str]:
    """The model's keys, its per-layer rules and its family (a GPT model type, ``mixtral``,
    ``qwen_moe``, ``deepseek`` or ``""``: the names its settings have)."""
    where, data = _load(config, source)
    if isinstance(data.get("text_config"), Mapping):   # a multimodal model's language model
        where, data = f"{where}: text_config", data["text_config"]
    model_type = data.get("model_type")
    if isinstance(model_type, str):
        data = {**LIBRARY_DEFAULTS.get(model_type, {}), **data}
    read = _Reader(data, where)
    if model_type in GPT_LIKE:
        return _gpt(read, model_type), {}, model_type
    if model_type in LLAMA_LIKE:
        keys, rules = _llama(read, model_type)
        family = ""
        for name, experts in (("mixtral", _mixtral), ("qwen_moe", _qwen_moe),
                              ("deepseek", _deepseek)):
            more, rule = experts(read, model_type)
            if more:   # at most one of them reads
                keys.update(more)
                rules.update(rule)
                family = name
        return keys, rules, family
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


class _Reader:
    """Settings of one config, checked as they are read (errors name the config's key)."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def integer(self, key: str, default: Any = ..., *, minimum: int = 1) -> Any:
        """An integer of at least ``minimum`` (``default`` when absent or null; required
        without one)."""
        value = self.data.get(key)
        if value is None and default is not ...:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise config_error(self.where, key, what, value)
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise config_error(self.where, key, "true or false", value)
        return value

    def layer_types(self) -> list[int]:
        """``layer_types`` as 1 (sliding window) and 0 (full attention) per layer, shortened
        to its period, so that it repeats over another layer count."""
        value = self.data.get("layer_types")
        if not isinstance(value, list) or not value or \
                not all(isinstance(v, str) and v in LAYER_TYPES for v in value):
            raise config_error(self.where, "layer_types", "a list of " + " or ".join(
                LAYER_TYPES) + " per layer", value)
        pattern = [LAYER_TYPES[v] for v in value]
        period = next(p for p in range(1, len(pattern) + 1)
                      if all(pattern[i] == pattern[i % p] for i in range(len(pattern))))
        return pattern[:period]

    def layer_list(self, key: str) -> list[int]:
        """A list of non-negative integers (absent or null: empty)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise config_error(self.where, key, "a list of layer numbers", value)
        return value


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
    base = Path(source).parent if Path(source).is_file() else Path.cwd()
    if (base / name).exists():
        return None
    from ...resources import bundled_dir, bundled_names

    path = bundled_dir("model") / f"{name}.json"
    if path.is_file():
        return path
    raise config_error(source, "config", "a Hugging Face config.json (a path relative to the "
                       "spec) or a bundled model: " + ", ".join(bundled_names("model")), name)


def _gpt(read: _Reader, model_type: str) -> dict[str, Any]:
    names, position, tied = GPT_LIKE[model_type]
    keys = {key: read.integer(_held(read, alternatives)) for key, alternatives in names.items()
            if key != "ffn"}
    ffn = names.get("ffn")
    keys["ffn"] = read.integer(ffn[0], 4 * keys["hidden"]) if ffn else 4 * keys["hidden"]
    keys.update(vocab=read.integer("vocab_size"), gated_mlp=False, position_embedding=position,
                tied_embeddings=read.flag("tie_word_embeddings", tied))
    return keys


def _held(read: _Reader, names: tuple[str, ...]) -> str:
    """The first of a key's ``names`` the config holds (else the first, which is then
    reported missing)."""
    return next((name for name in names if read.data.get(name) is not None), names[0])


def _llama(read: _Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    heads = read.integer("num_attention_heads")
    keys = {"layers": read.integer("num_hidden_layers"), "hidden": read.integer("hidden_size"),
            "heads": heads, "kv_heads": read.integer("num_key_value_heads", heads),
            "ffn": read.integer("intermediate_size"), "vocab": read.integer("vocab_size"),
            "gated_mlp": True, "position_embedding": "rope",
            "tied_embeddings": read.flag("tie_word_embeddings", LLAMA_LIKE[model_type])}
    head_dim = read.integer("head_dim", 0)
    if head_dim and head_dim * heads != keys["hidden"]:
        keys["head_dim"] = head_dim
    window, rules = _window(read, model_type)
    keys.update(window)
    return keys, rules


def _window(read: _Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    """The sliding window and the layers it applies to, as the library builds them (see the
    module docstring); a model type whose modules take no window ignores the key."""
    window = read.integer("sliding_window", 0)
    qwen = model_type.startswith("qwen")
    if not window or model_type not in WINDOW_TYPES or (
            qwen and not read.flag("use_sliding_window", False)):
        return {}, {}
    if read.data.get("layer_types") is not None:
        pattern = read.layer_types()
        return {"window": window}, {"window_skip_freq": lambda layers: [
            pattern[i % len(pattern)] for i in range(layers)]}
    if model_type in ALTERNATING:
        return {"window": window}, {"window_skip_freq": lambda layers: [
            int(i % 2 == 0) for i in range(layers)]}
    if model_type == "gemma3_text":
        every = read.integer("sliding_window_pattern", 6)
        return {"window": window}, {"window_skip_freq": lambda layers: [
            int((i + 1) % every != 0) for i in range(layers)]}
    if model_type in ("qwen2", "qwen3", "qwen2_moe"):
        first = read.integer("max_window_layers", 28)   # transformers' default for Qwen
        return {"window": window}, {
            "window_skip_freq": lambda layers: [int(i >= first) for i in range(layers)]}
    return {"window": window}, {}   # every layer: Mistral, Mixtral, Phi-3, Qwen3-MoE


def _mixtral(read: _Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    if model_type not in ("mixtral", "gpt_oss"):
        return {}, {}
    return {"experts": read.integer("num_local_experts"),
            "top_k": read.integer("num_experts_per_tok"),
            "moe_ffn": read.integer("intermediate_size")}, {}


def _qwen_moe(read: _Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    if model_type not in ("qwen2_moe", "qwen3_moe"):
        return {}, {}
    step = read.integer("decoder_sparse_step", 1)
    dense = set(read.layer_list("mlp_only_layers"))
    keys = {"experts": read.integer("num_experts"),
            "top_k": read.integer("num_experts_per_tok"),
            "moe_ffn": read.integer("moe_intermediate_size"),
            "shared_ffn": read.integer("shared_expert_intermediate_size", 0, minimum=0)}
    # Qwen's rule: layer i a mixture unless listed dense, when the step divides i + 1
    return keys, {"moe_layer_freq": lambda layers: [
        int(i not in dense and (i + 1) % step == 0) for i in range(layers)]}


def _deepseek(read: _Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    if not model_type.startswith("deepseek"):
        return {}, {}
    width = read.integer("moe_intermediate_size")
    first = read.integer("first_k_dense_replace", 0, minimum=0)
    freq = read.integer("moe_layer_freq", 1)
    keys: dict[str, Any] = {
        "experts": read.integer("n_routed_experts"),
        "top_k": read.integer("num_experts_per_tok"),
        "moe_ffn": width, "shared_ffn": read.integer("n_shared_experts", 0, minimum=0) * width,
        "mla": {"q_lora_rank": read.integer("q_lora_rank", 0, minimum=0),
                "kv_lora_rank": read.integer("kv_lora_rank"),
                "qk_head_dim": read.integer("qk_nope_head_dim"),
                "qk_pos_emb_head_dim": read.integer("qk_rope_head_dim"),
                "v_head_dim": read.integer("v_head_dim")}}
    if read.integer("num_nextn_predict_layers", 0, minimum=0):
        warnings.warn(f"{read.where}: key 'num_nextn_predict_layers' (multi-token "
                      "prediction) is not priced: the model's main layers only",
                      FlowsimWarning, stacklevel=6)
    # DeepSeek's rule: the first layers dense, then every freq-th one a mixture
    return keys, {"moe_layer_freq": lambda layers: [
        int(i >= first and i % freq == 0) for i in range(layers)]}
