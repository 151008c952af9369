"""Readers of the transformer spec's structured values (the pipeline layout, the device
preset, the parallelisms' network dims): each validates one key and names it in its error;
and the defaults that follow from other keys (per-layer patterns, the gated MLP)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Literal

from ..._validate import (
    MAX_INT,
    as_int,
    check_unknown_keys,
    choices_of,
    read_choice,
    read_int,
    read_list,
)
from ...errors import FlowsimWarning, config_error
from ...topology.network_config import MAX_DIMS, MAX_NPUS
from ..kernels import BLOCK_SCALED_RECIPES, FP8_RECIPES, NVFP4_BYTES

#: Largest value of each integer key: far beyond any model, and small enough that every FLOP
#: and byte count stays finite.
MAXIMA = {"layers": MAX_INT, "micro_batches": MAX_INT, "global_batch": MAX_INT,
          "hidden": 1 << 24, "sequence": 1 << 24, "micro_batch": 1 << 20, "heads": 1 << 24,
          "kv_heads": 1 << 24, "head_dim": 1 << 16, "ffn": 1 << 26, "moe_ffn": 1 << 26,
          "shared_ffn": 1 << 26, "moe_latent": 1 << 24, "vocab": 1 << 26, "dtype_bytes": 64,
          "dp": MAX_NPUS,
          "tp": MAX_NPUS, "pp": MAX_NPUS, "cp": MAX_NPUS, "ep": MAX_NPUS, "vpp": 1 << 16,
          "experts": 1 << 20, "top_k": 1 << 20, "window": 1 << 24, "bucket_size": MAX_INT,
          "fsdp_shard": MAX_INT, "fsdp_replicas": MAX_INT, "expert_tp": MAX_NPUS,
          "node_limit": MAX_NPUS, "routing_groups": 1 << 20,
          "microbatch_group": MAX_INT, "mtp_layers": 1 << 10, "metric_cross_entropies": 1 << 10,
          "recompute_every": MAX_INT, "recompute_layers": MAX_INT, "lora_rank": 1 << 16,
          "cpu_offload_layers": MAX_INT, "bf16_layers_at_start": MAX_INT,
          "bf16_layers_at_end": MAX_INT, "document_tokens": 1 << 24,
          "offload_min_elements": MAX_INT, "offload_max_inflight": MAX_INT}
#: The parallelisms, innermost first in Megatron-Core's default rank order ("tp-cp-ep-dp-pp").
Parallelism = Literal["tp", "cp", "ep", "dp", "pp"]
PARALLELISMS: tuple[Parallelism, ...] = choices_of(Parallelism)


#: the named pipeline layouts (:func:`~.transformer_schedule.layer_counts`)
LAYOUTS = ("even", "first_last_fewer", "uniform", "embedding_weighted")


def read_layout(values: Mapping[str, Any], source: str) -> tuple[int, ...] | str:
    """``pipeline_layout``: ``even``, ``first_last_fewer``, ``uniform``,
    ``embedding_weighted`` or layers per (virtual) stage."""
    raw = values.get("pipeline_layout", "even")
    if isinstance(raw, str):
        return read_choice(values, "pipeline_layout", LAYOUTS,
                           source=source, default="even")
    return tuple(read_list(values, "pipeline_layout", partial(as_int, minimum=0,
                                                              maximum=MAX_INT),
                           source=source, max_length=1 << 16,
                           what="'even', 'first_last_fewer', 'uniform', "
                                "'embedding_weighted' or a list of layers per "
                                "(virtual) pipeline stage"))


def read_device(values: Mapping[str, Any], source: str) -> str | None:
    """``device``: a preset's name, checked now (``None`` when absent)."""
    if values.get("device") is None:
        return None
    from ...topology.clusters import device_name

    # the preset is checked now (a clear error naming the key) and kept by name
    return device_name(values["device"], source=source, key="device")


def read_dims(value: Any, source: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """``dims``: network dims per parallelism, each dim given to one at most."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise config_error(source, "dims", "a mapping of tp, cp, ep, dp, pp to lists of "
                                           "network dims, e.g. {tp: [0], dp: [1, 2], pp: [3]}",
                           value)
    used: dict[int, str] = {}
    out = []
    check_unknown_keys(value, PARALLELISMS, source=source, prefix="dims.")
    for name in PARALLELISMS:
        raw = value.get(name, [])
        items = read_list(value, name, partial(as_int, minimum=0, maximum=MAX_DIMS),
                          source=source, prefix="dims.", default=[], scalar=True,
                          max_length=MAX_DIMS, what="a list of network dim indices >= 0")
        for d in items:
            if int(d) in used:
                raise config_error(source, f"dims.{name}",
                                   f"dims not given to another parallelism (dim {d} is "
                                   f"already in dims.{used[int(d)]})", raw)
            used[int(d)] = name
        out.append((name, tuple(sorted(int(d) for d in items))))
    return tuple(out)


def read_moe_layers(values: Mapping[str, Any], source: str) -> tuple[int, ...] | int:
    """``moe_layer_freq`` (Megatron-Core's ``--moe-layer-freq``): every N-th layer is a
    mixture of experts (an integer N, from layer 0), or a pattern of 0 (dense MLP) and 1 (MoE)
    per layer, as a list or as Megatron-LM's Python expression (``"[0]*3+[1]*58"``).
    Returns the integer (1 when absent or null), or the pattern (checked against ``layers``
    later)."""
    pattern = read_layer_pattern(values, "moe_layer_freq", source, "a mixture of experts")
    return 1 if pattern is None else pattern


#: longest per-layer pattern, and longest list expression of one (characters)
MAX_PATTERN = 1 << 20
MAX_EXPRESSION = 10_000


def read_layer_pattern(values: Mapping[str, Any], key: str, source: str, what: str
                       ) -> tuple[int, ...] | int | None:
    """A per-layer pattern in Megatron-LM's forms: an integer N, or 0 and 1 per layer as a
    list or as its Python list expression; None when absent or null."""
    raw = values.get(key)
    if raw is None:
        return None
    what = (f"an integer N (every N-th layer {what}), or a list of 0 and 1 per layer, "
            f"e.g. [0, 1, 0, 1] or \"[0]*3+[1]*58\"")
    if isinstance(raw, str) and re.fullmatch(r"\s*-?[0-9]{1,18}\s*", raw):
        raw = int(raw)
    if isinstance(raw, str):
        raw = list_expression(raw, key, source, what)
    if isinstance(raw, bool):
        raise config_error(source, key, what, raw)
    if isinstance(raw, int):
        if raw < 1 or raw > MAX_INT:
            raise config_error(source, key, what, raw)
        return raw
    items = read_list({key: raw}, key, partial(as_int, minimum=0, maximum=1), source=source,
                      max_length=MAX_PATTERN, what=what)
    return tuple(int(i) for i in items)


def list_expression(text: str, key: str, source: str, what: str) -> list[int]:
    """Megatron-LM's list expression (``--moe-layer-freq``): list displays of integers joined
    by ``+`` and repeated by ``*`` (evaluated without ``eval``)."""
    import ast

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) \
                    and isinstance(right, list) and len(left) + len(right) <= MAX_PATTERN:
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, int):   # 3*[1] as [1]*3
                left, right = right, left
            if isinstance(node.op, ast.Mult) and isinstance(left, list) \
                    and isinstance(right, int) and 0 <= right \
                    and len(left) * right <= MAX_PATTERN:
                return left * right
        raise ValueError

    if len(text) > MAX_EXPRESSION:   # a longer one is no layer list a script writes
        raise config_error(source, key, what, text[:40] + "...")
    try:
        out = value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        raise config_error(source, key, what, text) from None
    if not isinstance(out, list):
        raise config_error(source, key, what, text)
    return out


def moe_pattern(freq: tuple[int, ...] | int, layers: int, experts: int, source: str
                ) -> tuple[int, ...]:
    """``moe_layer_freq`` as a pattern per layer (Megatron-Core's ``moe_layer_pattern``:
    an integer N makes every N-th layer from layer 0 a mixture of experts), () when every
    layer is one; checked against ``layers`` and ``experts``."""
    pattern = freq if isinstance(freq, tuple) else \
        tuple(int(i % freq == 0) for i in range(layers)) if freq > 1 else ()
    if not pattern and not isinstance(freq, tuple):
        return ()
    found = freq if isinstance(freq, int) else list(freq)
    if not experts:
        raise config_error(source, "moe_layer_freq", "1 (unset) without experts", found)
    if len(pattern) != layers:
        raise config_error(source, "moe_layer_freq", f"{layers} entries, one per layer "
                                                     f"(layers={layers})", found)
    if not any(pattern):
        raise config_error(source, "moe_layer_freq", "at least one 1 (a layer with experts)",
                           found)
    return () if all(pattern) else pattern


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention's widths (``mla``), with Megatron-Core's
    ``MLATransformerConfig`` defaults (Megatron-LM's command line defaults differ:
    ``--q-lora-rank`` none, ``--kv-lora-rank`` 32): queries and keys/values projected down
    to low-rank latents and up again per head; see :mod:`.transformer_mla`."""

    #: the queries' latent (0: projected from the hidden state directly)
    q_lora_rank: int = 512
    #: the keys' and values' shared latent
    kv_lora_rank: int = 512
    #: a query and key head's width without and with its rotary part, a value head's
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128


def read_mla(values: Mapping[str, Any], source: str) -> LatentAttention | None:
    """``mla``: a mapping of :class:`LatentAttention`'s widths (null: standard attention)."""
    raw = values.get("mla")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise config_error(source, "mla", "a mapping of q_lora_rank, kv_lora_rank, "
                                          "qk_head_dim, qk_pos_emb_head_dim, v_head_dim", raw)
    check_unknown_keys(raw, [f.name for f in fields(LatentAttention)], source=source,
                       prefix="mla.")
    defaults = LatentAttention()
    return LatentAttention(**{f.name: read_int(
        raw, f.name, source=source, prefix="mla.", default=getattr(defaults, f.name),
        minimum=0 if f.name in ("q_lora_rank", "qk_pos_emb_head_dim") else 1,
        maximum=1 << 20) for f in fields(LatentAttention)})


#: other spellings of the data types: PyTorch's (a Hugging Face config's ``torch_dtype``) and
#: the FP8 formats of Transformer Engine's recipes (``e4m3``; ``hybrid``: E4M3 forward, E5M2
#: gradients), all priced as FP8 GEMMs
DTYPE_SYNONYMS = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "e4m3": "fp8",
                  "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8", "hybrid": "fp8"}


def read_precision(values: Mapping[str, Any], source: str,
                   dtypes: tuple[str, ...]) -> tuple[str, str]:
    """``dtype`` and ``fp8_recipe`` (:data:`~flowsim.workload.kernels.FP8_RECIPES`, default
    ``delayed``); ``dtype: mxfp8`` or ``dtype: nvfp4`` (NVIDIA's tables' names) is
    low-precision training under that recipe (``nvfp4``: the layers' GEMMs in FP4). A recipe
    other than ``delayed`` needs FP8."""
    found = values.get("dtype")
    named = found.strip().lower() if isinstance(found, str) else None
    block = named if named in BLOCK_SCALED_RECIPES else None
    dtype = "fp8" if block else read_dtype(values, source, dtypes)
    recipe = read_choice(values, "fp8_recipe", FP8_RECIPES, source=source,
                         default=block or "delayed", case_insensitive=True)
    if block and recipe != block:
        raise config_error(source, "fp8_recipe", f"{block} or unset with dtype: {block}",
                           recipe)
    if dtype != "fp8" and recipe != "delayed":
        raise config_error(source, "fp8_recipe", "unset unless dtype is fp8, mxfp8 or nvfp4",
                           recipe)
    return dtype, recipe


def gathered_bytes(spec: Any) -> float:
    """Bytes per element of a layer's activation all-gathered in low precision: two in 16-bit
    training; one in FP8 (Transformer Engine casts before it gathers); NVFP4's half a byte and
    its block's share of an E4M3 scale (``_all_gather_nvfp4``). The one rule for every
    ``spec.dtype == "fp8"`` gather, NVFP4 included (its recipe is an ``fp8_recipe``)."""
    return low_bytes(spec.dtype, spec.fp8_recipe)


def low_bytes(dtype: str, recipe: str) -> float:
    """Bytes per element of a tensor Transformer Engine quantized under ``dtype`` and
    ``recipe`` (:func:`gathered_bytes`'s rule): two unless ``dtype`` is fp8."""
    if dtype != "fp8":
        return 2.0
    return NVFP4_BYTES if recipe == "nvfp4" else 1.0


def weight_bytes(spec: Any, *, kept: bool = False) -> float:
    """Bytes per element the layers' weights are gathered in (``kept``: kept in memory): one
    with ``fp8_param_gather`` under tensor scaling (Megatron-LM's ``--fp8-param-gather``);
    NVFP4's half a byte and its block's share of an E4M3 scale (``--fp4-param-gather``),
    kept in both layouts (Transformer Engine's weight quantizer writes the row- and
    column-wise copies: twice that); MXFP8's byte and its 32-element block's E8M0 scale under
    ``fsdp`` (Megatron-FSDP gathers the row-wise layout for the forward and the column-wise
    one for the backward, and keeps both shards); else two, MXFP8's too (Megatron-Core's
    optimizer gathers them in 16 bits into the gradient buffer and casts them after,
    ``reuse_grad_buf_for_mxfp8_param_ag``, keeping both layouts, about as many bytes)."""
    if not spec.fp8_param_gather or (spec.fp8_recipe == "mxfp8" and not spec.fsdp):
        return 2.0
    if spec.fp8_recipe in ("nvfp4", "mxfp8"):   # (MXFP8: an E8M0 scale per 32 elements)
        block = gathered_bytes(spec) if spec.fp8_recipe == "nvfp4" else 1 + 1 / 32
        return block * (2 if kept else 1)
    return 1.0


def read_dtype(values: Mapping[str, Any], source: str, dtypes: tuple[str, ...]) -> str:
    """``dtype`` (one of ``dtypes`` or a synonym of one), or the legacy ``dtype_bytes`` (2 or
    1)."""
    if "dtype" in values or "dtype_bytes" not in values:
        found = values.get("dtype")
        if isinstance(found, str) and found.strip().lower() in DTYPE_SYNONYMS:
            values = {**values, "dtype": DTYPE_SYNONYMS[found.strip().lower()]}
        return read_choice(values, "dtype", dtypes, source=source, default="bf16",
                           case_insensitive=True)
    width = read_int(values, "dtype_bytes", source=source, minimum=1, maximum=64)
    if width not in (1, 2):
        raise config_error(source, "dtype_bytes", "2 (bf16) or 1 (fp8); prefer 'dtype'",
                           width)
    return "bf16" if width == 2 else "fp8"


def window_pattern(freq: tuple[int, ...] | int | None, layers: int, window: int,
                   source: str) -> tuple[int, ...]:
    """``window_skip_freq`` (Megatron-Core's ``window_attn_skip_freq``) as 1 (sliding window)
    or 0 (full attention) per layer, () when every layer attends through the window: an
    integer N makes every N-th layer (counted from 1) a full one, as
    ``is_layer_window_attention`` does."""
    if freq is None:
        return ()
    found = freq if isinstance(freq, int) else list(freq)
    if not window:
        raise config_error(source, "window_skip_freq", "unset without window", found)
    pattern = freq if isinstance(freq, tuple) else \
        tuple(int((i + 1) % freq != 0) for i in range(layers))
    if len(pattern) != layers:
        raise config_error(source, "window_skip_freq", f"{layers} entries, one per layer "
                                                       f"(layers={layers})", found)
    if isinstance(freq, tuple) and not any(pattern):   # a list windowing no layer
        raise config_error(source, "window_skip_freq", "at least one 1 (a layer attending "
                           "through the window)", found)
    return () if all(pattern) else pattern


def gated_mlp_default(spec: Any) -> bool:
    """``gated_mlp`` when the spec does not say: a gated (SwiGLU) MLP when an MLP width it
    gives (``ffn``, ``moe_ffn``, ``shared_ffn``) is not ``4 hidden``, the width of GPT's
    two-matrix MLP, with a warning saying so; else the two-matrix MLP (Megatron-LM's default
    without ``--swiglu``). Llama, Mistral, Mixtral, Qwen and DeepSeek widths are not 4 h;
    GPT-3's, Nemotron-4's, MPT's, BLOOM's and Falcon's are."""
    widths = {key: getattr(spec, key) for key in ("ffn", "moe_ffn", "shared_ffn")
              if getattr(spec, key)}
    odd = {key: width for key, width in widths.items() if width != 4 * spec.hidden}
    if not odd:
        return False
    key, width = next(iter(odd.items()))
    warnings.warn(f"{spec.source}: gated_mlp not given: {key}={width} is not 4 x "
                  f"hidden={4 * spec.hidden}, a gated (SwiGLU) MLP's width (Llama, Mistral, "
                  f"Qwen, DeepSeek): priced gated, three matrices; give gated_mlp: false for "
                  f"a two-matrix MLP, true to silence this", FlowsimWarning, stacklevel=2)
    return True
