"""What each model type's Hugging Face config says, read as ``transformers`` builds the
model (see :mod:`.huggingface` for the keys and rules): the family tables, the checked reader
and the readers of the GPT and Llama families' blocks and windows (the experts' readers:
:mod:`.huggingface_experts`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import config_error

#: model types whose blocks are Llama's (gated MLP, rotary embeddings), and whether their
#: configs tie the output layer to the embedding when they do not say
LLAMA_LIKE = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False,
              "olmo2": False, "olmo3": False, "granite": False, "phi3": False,
              "gemma": True, "gemma2": True, "gemma3_text": True, "glm4": False,
              "seed_oss": False, "smollm3": True, "exaone4": False, "cohere": True,
              "cohere2": True, "ministral": False, "ministral3": False, "nemotron": False,
              # with experts (:mod:`.huggingface_experts`)
              "mixtral": False, "phimoe": False, "granitemoe": False,
              "granitemoeshared": False, "olmoe": False, "qwen2_moe": False,
              "qwen3_moe": False, "deepseek_v2": False, "deepseek_v3": False,
              "deepseek_v32": False, "glm4_moe": False, "ernie4_5_moe": True,
              "hunyuan_v1_moe": False, "llama4_text": False, "gpt_oss": False}
#: the one with a plain two-GEMM MLP (Nemotron-4's squared ReLU)
PLAIN_MLP = ("nemotron",)
#: model types whose attention takes ``sliding_window`` (Qwen's and SmolLM3's only with
#: ``use_sliding_window``); the others' modules ignore the key
WINDOW_TYPES = ("mistral", "mixtral", "phi3", "phimoe", "qwen2", "qwen3", "qwen2_moe",
                "qwen3_moe", "gemma2", "gemma3_text", "gpt_oss", "olmo3", "smollm3",
                "exaone4", "cohere2", "ministral", "ministral3")
#: model types whose sliding-window layers alternate with full ones, the first one windowed
ALTERNATING = ("gemma2", "gpt_oss")
#: model types whose every n-th layer is full and the others windowed: the config key of n
#: (a string of L and G per layer for EXAONE 4) and the library's default
EVERY_NTH_FULL = {"gemma3_text": ("sliding_window_pattern", 6),
                  "cohere2": ("sliding_window_pattern", 4),
                  "exaone4": ("sliding_window_pattern", 4), "olmo3": ("", 4)}
#: model types whose layers are not all attention: what the others are (not priced)
HYBRID = {"qwen3_next": "Gated DeltaNet linear attention", "minimax": "lightning (linear) "
          "attention", "kimi_linear": "Kimi Delta Attention (linear)", "jamba": "Mamba",
          "mamba": "Mamba", "falcon_mamba": "Mamba", "zamba": "Mamba", "mamba2": "Mamba-2",
          "zamba2": "Mamba-2", "bamba": "Mamba-2",
          "falcon_h1": "Mamba-2 mixers", "granitemoehybrid": "Mamba-2",
          "lfm2": "short convolutions", "lfm2_moe": "short convolutions",
          "recurrent_gemma": "RG-LRU recurrences", "rwkv": "RWKV recurrences"}
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
    "phi": {"intermediate_size": 8192},
    "starcoder2": {"num_key_value_heads": 2, "intermediate_size": 12288},
    "falcon": {"num_hidden_layers": 32, "num_attention_heads": 71},
    "deepseek_v2": {"n_shared_experts": 2, "q_lora_rank": 1536},
    "deepseek_v3": {"num_key_value_heads": 128, "n_shared_experts": 1,
                    "first_k_dense_replace": 3, "q_lora_rank": 1536},
    "deepseek_v32": {"num_key_value_heads": 128, "n_shared_experts": 1,
                     "first_k_dense_replace": 3, "q_lora_rank": 1536},
    "glm4": {"num_key_value_heads": 2, "head_dim": 128},
    "glm4_moe": {"num_key_value_heads": 8, "n_shared_experts": 1},
    "seed_oss": {"num_key_value_heads": 8, "head_dim": 128},
    "smollm3": {"num_key_value_heads": 4},
    "olmo3": {"sliding_window": 4096},
    "exaone4": {"num_key_value_heads": 32, "sliding_window": 4096},
    "cohere2": {"sliding_window": 4096},
    "ministral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "ministral3": {"num_key_value_heads": 8, "head_dim": 128},
    "phimoe": {"num_key_value_heads": 8},
    "ernie4_5_moe": {"num_key_value_heads": 4, "moe_num_shared_experts": 2},
    "llama4_text": {"num_key_value_heads": 8, "head_dim": 128,
                    "intermediate_size_mlp": 16384, "attention_chunk_size": 8192},
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
    "phi": ({"layers": ("num_hidden_layers",), "hidden": ("hidden_size",),
             "heads": ("num_attention_heads",), "kv_heads": ("num_key_value_heads",),
             "ffn": ("intermediate_size",)}, "rope", False),
    "starcoder2": ({"layers": ("num_hidden_layers",), "hidden": ("hidden_size",),
                    "heads": ("num_attention_heads",), "kv_heads": ("num_key_value_heads",),
                    "ffn": ("intermediate_size",)}, "rope", True),
    # FalconConfig reads ``n_embed`` for ``hidden_size``; its key-value heads: see
    # falcon_kv_heads
    "falcon": ({"layers": ("num_hidden_layers",), "hidden": ("n_embed", "hidden_size"),
                "heads": ("num_attention_heads",), "ffn": ("ffn_hidden_size",)},
               "rope", True),
}
#: per-layer patterns as rules of the layer count: key -> (layers -> 1 or 0 per layer)
Rules = dict[str, Callable[[int], list[int]]]


class Reader:
    """Settings of one config, checked as they are read (errors name the config's key), and
    the config's name of every transformer key read from it (:attr:`names`, for the
    transformer's errors: "read from n_routed_experts"). A nested block's reader
    (:meth:`block`) names its keys ``block.key`` in the same table."""

    def __init__(self, data: Mapping[str, Any], where: str, *, prefix: str = "",
                 names: dict[str, str] | None = None) -> None:
        self.data, self.where, self.prefix = data, where, prefix
        self.names: dict[str, str] = {} if names is None else names

    def take(self, target: str, *keys: str, default: Any = ..., minimum: int = 1) -> Any:
        """Transformer key ``target`` from the first of ``keys`` the config holds (an
        integer, as :meth:`integer` reads it), its name recorded (a default is not the
        config's: no name)."""
        key = self.held(*keys)
        if self.data.get(key) is not None:
            self.names[target] = self.prefix + key
        return self.integer(key, default, minimum=minimum)

    def name(self, target: str, settings: str) -> None:
        """Record that transformer key ``target`` follows from ``settings`` (a rule's keys)."""
        self.names[target] = settings

    def block(self, key: str) -> Reader:
        """The reader of nested block ``key`` (absent or null: empty), sharing the names."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise config_error(self.where, key, "a mapping of the model's settings", value)
        return Reader(value or {}, f"{self.where}: {key}", prefix=f"{self.prefix}{key}.",
                      names=self.names)

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
        """True or false (``default`` when absent)."""
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

    def held(self, *names: str) -> str:
        """The first of a key's ``names`` the config holds (else the first, which is then
        reported missing)."""
        return next((name for name in names if self.data.get(name) is not None), names[0])

    def layer_flags(self, key: str) -> list[int]:
        """A list of 0 and 1 per layer (absent or null: empty)."""
        value = self.layer_list(key)
        if set(value) - {0, 1}:
            raise config_error(self.where, key, "a list of 0 and 1, one per layer", value)
        return value

    def layer_list(self, key: str) -> list[int]:
        """A list of non-negative integers (absent or null: empty)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise config_error(self.where, key, "a list of layer numbers", value)
        return value


def gpt_keys(read: Reader, model_type: str) -> dict[str, Any]:
    """A model of the GPT family: a plain two-GEMM MLP (4 x hidden unless the config says)."""
    names, position, tied = GPT_LIKE[model_type]
    keys = {key: read.take(key, *alternatives) for key, alternatives in names.items()
            if key not in ("ffn", "kv_heads")}
    ffn = names.get("ffn")
    keys["ffn"] = read.take("ffn", *ffn, default=4 * keys["hidden"]) if ffn else \
        4 * keys["hidden"]
    if "kv_heads" in names:   # Phi, StarCoder2: grouped-query, and their head width
        keys["kv_heads"] = read.take("kv_heads", *names["kv_heads"], default=keys["heads"])
        _head_dim(read, keys)
    if model_type == "falcon":
        keys["kv_heads"] = falcon_kv_heads(read, keys["heads"])
        position = "alibi" if read.data.get("alibi") else "rope"
    keys.update(vocab=read.take("vocab", "vocab_size"), gated_mlp=False,
                position_embedding=position,
                tied_embeddings=read.flag("tie_word_embeddings", tied))
    window = read.take("window", "sliding_window", default=0) if model_type == "starcoder2" \
        else 0
    if window:   # Starcoder2's attention takes it on every layer
        keys["window"] = window
    return keys


def falcon_kv_heads(read: Reader, heads: int) -> int:
    """Falcon's key-value heads: ``num_kv_heads`` with the new decoder architecture (40B,
    180B), one with ``multi_query`` (7B), else one per head."""
    if read.data.get("new_decoder_architecture"):
        return read.take("kv_heads", "num_kv_heads", default=heads)
    return 1 if read.data.get("multi_query", True) else heads


def llama_keys(read: Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    """A model of the Llama family: grouped-query attention, a gated MLP (plain for
    :data:`PLAIN_MLP`), rotary embeddings, and its sliding window's layers."""
    heads = read.take("heads", "num_attention_heads")
    keys = {"layers": read.take("layers", "num_hidden_layers"),
            "hidden": read.take("hidden", "hidden_size"), "heads": heads,
            "kv_heads": read.take("kv_heads", "num_key_value_heads", default=heads),
            "ffn": read.take("ffn", "intermediate_size"),
            "vocab": read.take("vocab", "vocab_size"),
            "gated_mlp": model_type not in PLAIN_MLP, "position_embedding": "rope",
            "tied_embeddings": read.flag("tie_word_embeddings", LLAMA_LIKE[model_type])}
    _head_dim(read, keys)
    window, rules = _window(read, model_type)
    keys.update(window)
    return keys, rules


def _head_dim(read: Reader, keys: dict[str, Any]) -> None:
    """``head_dim`` into ``keys`` when the config gives one other than hidden / heads, or
    when it gives none and heads do not divide hidden (the library's default width is then
    ``hidden // heads``, rounded down)."""
    head_dim = read.take("head_dim", "head_dim", default=0, minimum=0) or \
        keys["hidden"] // max(1, keys["heads"])
    if head_dim and head_dim * keys["heads"] != keys["hidden"]:
        keys["head_dim"] = head_dim


def _window(read: Reader, model_type: str) -> tuple[dict[str, Any], Rules]:
    """The sliding window and the layers it applies to, as the library builds them (see the
    module docstring); a model type whose modules take no window ignores the key."""
    window = read.take("window", "sliding_window", default=0)
    flagged = model_type.startswith("qwen") or model_type == "smollm3"
    if not window or model_type not in WINDOW_TYPES or (
            flagged and not read.flag("use_sliding_window", False)):
        return {}, {}
    if read.data.get("layer_types") is not None:
        read.name("window_skip_freq", "layer_types")
        pattern = read.layer_types()
        return {"window": window}, {"window_skip_freq": lambda layers: [
            pattern[i % len(pattern)] for i in range(layers)]}
    if model_type in ALTERNATING:
        return {"window": window}, {"window_skip_freq": lambda layers: [
            int(i % 2 == 0) for i in range(layers)]}
    if model_type in EVERY_NTH_FULL:
        read.name("window_skip_freq", EVERY_NTH_FULL[model_type][0] or "the model's rule")
        return {"window": window}, {"window_skip_freq": _every_nth_full(read, model_type)}
    if model_type == "smollm3":   # the window on the layers without rotary embeddings
        read.name("window_skip_freq", "no_rope_layers")
        rotary = read.layer_flags("no_rope_layers")
        every = read.integer("no_rope_layer_interval", 4)
        return {"window": window}, {"window_skip_freq": lambda layers: [
            int(rotary[i] == 0) if i < len(rotary) else int((i + 1) % every == 0)
            for i in range(layers)]}
    if model_type in ("qwen2", "qwen3", "qwen2_moe"):
        read.name("window_skip_freq", "max_window_layers")
        first = read.integer("max_window_layers", 28)   # transformers' default for Qwen
        return {"window": window}, {
            "window_skip_freq": lambda layers: [int(i >= first) for i in range(layers)]}
    return {"window": window}, {}   # every layer: Mistral, Mixtral, Phi-3, Qwen3-MoE, ...


def _every_nth_full(read: Reader, model_type: str) -> Callable[[int], list[int]]:
    """Windowed layers but every n-th (n: the model's key or default), or as a string of
    ``L`` (local: windowed) and ``G`` (global) repeated over the layers (EXAONE 4)."""
    key, default = EVERY_NTH_FULL[model_type]
    value = read.data.get(key) if key else None
    if isinstance(value, str):
        if not value or set(value) - {"L", "G"}:
            raise config_error(read.where, key, "a layer count or a string of L and G",
                               value)
        return lambda layers: [int(value[i % len(value)] == "L") for i in range(layers)]
    every = read.integer(key, default) if key else default
    return lambda layers: [int((i + 1) % every != 0) for i in range(layers)]
