"""The models torchtitan ships, as :mod:`.torchtitan` reads a job config's ``model.name`` and
``model.flavor``: each family's flavors transcribed from torchtitan's source, and the
transformer keys of one flavor (:data:`MODELS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

#: torchtitan's Llama flavors per ``model.name`` (``torchtitan/models/llama3/__init__.py``
#: at e7c0cae; Llama 2's in ``torchtitan/models/llama/__init__.py`` at 3ff7fbb, mid-2024):
#: (layers, width, heads, key-value heads (0: as many as heads), ffn_dim_multiplier (0: none),
#: multiple_of)
FLAVORS = {
    "llama3": {"8B": (32, 4096, 32, 8, 1.3, 1024), "70B": (80, 8192, 64, 8, 1.3, 4096),
               "405B": (126, 16384, 128, 8, 1.2, 4096)},
    "llama2": {"7B": (32, 4096, 32, 0, 0, 256), "13B": (40, 5120, 40, 0, 0, 256),
               "26B": (80, 5120, 40, 0, 0, 256), "70B": (80, 8192, 64, 8, 1.3, 4096)}}
#: torchtitan's dense Qwen 3 flavors (``torchtitan/models/qwen3/__init__.py`` at 5fb7cc2, late
#: 2025): (layers, width, heads, key-value heads, ffn, tied embeddings); heads 128 wide, a
#: 151,936-token vocabulary (the per-head query and key norms are left out: a few bytes a token)
QWEN3 = {"0.6B": (28, 1024, 16, 8, 3072, True), "1.7B": (28, 2048, 16, 8, 6144, True),
         "4B": (36, 2560, 32, 8, 9728, True), "8B": (36, 4096, 32, 8, 12288, False),
         "14B": (40, 5120, 40, 8, 17408, False), "32B": (64, 5120, 64, 8, 25600, False)}
#: torchtitan's DeepSeek flavors (``torchtitan/models/deepseek_v3/__init__.py`` at 5fb7cc2):
#: (layers of which dense, width, heads, dense ffn, expert ffn, experts, shared experts,
#: top-k, q_lora_rank, vocabulary); latent attention with kv_lora_rank 512, heads 128 + 64
#: rotary wide for queries and keys, 128 for values
DEEPSEEK_V3 = {"16B": (27, 1, 2048, 16, 10944, 1408, 64, 2, 6, 0, 102400),
               "236B": (60, 1, 5120, 128, 12288, 1536, 160, 2, 6, 1536, 102400),
               "671B": (61, 3, 7168, 128, 18432, 2048, 256, 1, 8, 1536, 129280)}
#: torchtitan's Llama 4 flavors (``torchtitan/models/llama4/``, 5fb7cc2; the ``_irope``
#: ones' chunked attention is not modelled): (experts, every how many layers a mixture of
#: experts) on 48 layers 5120 wide, 40 heads of which 8 key-value, top-1 routing beside one
#: shared expert, dense MLPs 16384 wide, expert MLPs 8192 (halved by top-k + shared, its
#: ``auto_scale_hidden_dim``), a 202,048-token vocabulary
LLAMA4 = {"17bx16e": (16, 1), "17bx128e": (128, 2)}
#: the tokenizers' vocabularies (``vocab_size`` is set from the tokenizer): Llama 3's
#: tiktoken, Llama 2's SentencePiece
VOCAB = {"llama3": 128256, "llama2": 32000}
#: what every torchtitan model shares: a gated MLP, rotary positions, PyTorch's flash SDPA,
#: an output layer of its own (unless the flavor ties it)
COMMON = {"gated_mlp": True, "tied_embeddings": False, "position_embedding": "rope",
          "attention": "flash2"}


def _llama(family: str, flavor: str) -> dict[str, Any]:
    layers, dim, heads, kv_heads, multiplier, multiple = FLAVORS[family][flavor]
    ffn = int(2 * 4 * dim / 3)   # torchtitan's FeedForward
    ffn = int(multiplier * ffn) if multiplier else ffn
    return {"layers": layers, "hidden": dim, "heads": heads, "kv_heads": kv_heads or heads,
            "ffn": multiple * -(-ffn // multiple), "vocab": VOCAB[family]}


def _qwen3(flavor: str) -> dict[str, Any]:
    layers, dim, heads, kv_heads, ffn, tied = QWEN3[flavor]
    return {"layers": layers, "hidden": dim, "heads": heads, "kv_heads": kv_heads,
            "head_dim": 128, "ffn": ffn, "vocab": 151936, "tied_embeddings": tied}


def _deepseek_v3(flavor: str) -> dict[str, Any]:
    layers, dense, dim, heads, ffn, moe_ffn, experts, shared, top_k, q_lora, vocab = \
        DEEPSEEK_V3[flavor]
    return {"layers": layers, "hidden": dim, "heads": heads, "kv_heads": heads, "ffn": ffn,
            "moe_ffn": moe_ffn, "experts": experts, "top_k": top_k,
            "shared_ffn": shared * moe_ffn, "vocab": vocab,
            "moe_layer_freq": [0] * dense + [1] * (layers - dense),
            "mla": {"q_lora_rank": q_lora, "kv_lora_rank": 512, "qk_head_dim": 128,
                    "qk_pos_emb_head_dim": 64, "v_head_dim": 128},
            "expert_layout": "within_dp"}


def _llama4(flavor: str) -> dict[str, Any]:
    experts, step = LLAMA4[flavor]
    return {"layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8, "ffn": 16384,
            "moe_ffn": 8192, "shared_ffn": 8192, "experts": experts, "top_k": 1,
            "moe_layer_freq": [int((i + 1) % step == 0) for i in range(48)],
            "vocab": 202048, "expert_layout": "within_dp"}


#: ``model.name`` -> (its flavors, the shape of one)
MODELS: dict[str, tuple[Mapping[str, Any], Callable[[str], dict[str, Any]]]] = {
    "llama3": (FLAVORS["llama3"], partial(_llama, "llama3")),
    "llama2": (FLAVORS["llama2"], partial(_llama, "llama2")),
    "qwen3": (QWEN3, _qwen3), "deepseek_v3": (DEEPSEEK_V3, _deepseek_v3),
    "llama4": (LLAMA4, _llama4)}
