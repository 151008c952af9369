"""A precision per layer and per module, as Megatron-Core sets them in low-precision training.

* **The first and last layers in BF16** (``bf16_layers_at_start``, ``bf16_layers_at_end``:
  Megatron-Core's ``first_last_layers_bf16`` with ``num_layers_at_start_in_bf16`` and
  ``num_layers_at_end_in_bf16``). Those decoder layers run outside the FP8 or NVFP4 autocast
  (``fp8_utils.get_fp8_context``, ``fp4_utils.get_fp4_context`` with the layer's number,
  counted over the whole model).
* **A quantization recipe** (``quant_recipe``: Megatron-Core's ``--te-precision-config-file``,
  Megatron-Bridge's ``model.quant_recipe``; ``megatron/core/quantization/quant_config.py``).
  Its matchers, in order, compare each Transformer Engine module's path in the model
  (``decoder.layers.3.mixer.out_proj``) with a glob pattern; the first that matches names
  the module's config: a recipe (``tensorwise``, ``mxfp8``, ``nvfp4``) or none (16 bits).
  A config replaces the autocast of a quantized layer (``override_quantized_autocast``, on by
  default) and turns one on in a 16-bit layer only with ``override_nonquantized_autocast``.
* **Multi-token prediction**: a depth's block (its ``eh_proj``, and a transformer depth's
  layer) runs in the run's FP8 context, never a decoder layer's 16 bits, and ignores FP4
  (``multi_token_prediction.py``), so it is 16-bit in NVFP4 training. A hybrid model's depth
  is a ``HybridStack`` of its own whose layers take the per-layer context again, numbered
  from 0 within the depth (``hybrid_block.py``): NVFP4 included, and 16 bits for the first
  ``num_layers_at_start_in_bf16`` of them.

The paths are Megatron-Core's module names: a layer's index is its place in its model chunk
(``HybridStack`` and ``TransformerBlock`` number their ``layers`` from 0 on every stage); a
depth's modules sit under ``mtp.layers.<j>`` (``mtp.layers.0`` for every depth of a repeated
one), its layer under ``mtp_model_layer`` (a hybrid depth's under ``mtp_model_layer.layers.<i>``).
A layer's kernels are priced in their module's precision (:meth:`.LayerShapes._gemm`,
:meth:`.LayerShapes._cast`). Not modelled: the decoder layers' sequence-parallel gathers
(userbuffers' too; a latent attention's latents and a depth's projection input go in their
layer's precision) and every parameter gather stay in the run's precision, and so does the
memory estimate; a multi-head latent attention's one cast of its queries' and keys' latents
takes the query projection's precision.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, cast

import yaml

from ...errors import ConfigError, FlowsimWarning, config_error
from ..kernels import Fp8Recipe
from .transformer_schedule import layer_counts
from .transformer_spec import TransformerSpec

#: what a quantization config can ask of a module: 16 bits, or a recipe flowsim prices
PRECISIONS = ("bf16", "tensorwise", "mxfp8", "nvfp4")

#: every Transformer Engine module flowsim prices, by its path inside a layer
MODULES = ("self_attention.linear_qkv", "self_attention.linear_proj",
           "self_attention.linear_q_proj", "self_attention.linear_q_down_proj",
           "self_attention.linear_q_up_proj", "self_attention.linear_kv_down_proj",
           "self_attention.linear_kv_up_proj", "mlp.linear_fc1", "mlp.linear_fc2",
           "mlp.experts.linear_fc1", "mlp.experts.linear_fc2",
           "mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2",
           "mlp.fc1_latent_proj", "mlp.fc2_latent_proj", "mixer.in_proj", "mixer.out_proj",
           "eh_proj")


class QuantRule(NamedTuple):
    """One enabled matcher of a quantization recipe, with the config it names."""

    pattern: str
    precision: str
    override_quantized: bool = True
    override_nonquantized: bool = False


# ---------------------------------------------------------------------- reading the recipe
def read_quant_recipe(value: Any, source: str) -> tuple[QuantRule, ...]:
    """``quant_recipe``: Megatron-Core's recipe (``configs:`` and ``matchers:``, the format of
    its ``te_quant.cfg`` files), inline or the path of such a YAML file relative to
    ``source``'s folder; ``None``: no recipe."""
    if value is None:
        return ()
    where = f"{source}: quant_recipe"
    if isinstance(value, str):
        path = Path(source).parent / value
        try:
            value = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise config_error(source, "quant_recipe", "a readable quantization recipe file "
                               f"({exc.strerror})", str(path)) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
        where = str(path)
    if not isinstance(value, Mapping) or not isinstance(value.get("matchers"), Mapping):
        raise config_error(source, "quant_recipe", "Megatron-Core's quantization recipe: a "
                           "mapping with configs: and matchers: (or its YAML file)",
                           type(value).__name__)
    configs = value.get("configs") or {}
    rules = []
    for name, matcher in value["matchers"].items():
        if not isinstance(matcher, Mapping):
            raise config_error(where, f"matchers.{name}", "a mapping (type, pattern, config, "
                               "enabled)", matcher)
        if not matcher.get("enabled", False):   # Megatron-Core skips disabled matchers
            continue
        if matcher.get("type") != "glob":
            raise config_error(where, f"matchers.{name}.type", "glob", matcher.get("type"))
        pattern, key = matcher.get("pattern"), matcher.get("config")
        if not isinstance(pattern, str) or not pattern:
            raise config_error(where, f"matchers.{name}.pattern", "a glob pattern", pattern)
        if not isinstance(configs, Mapping) or key not in configs:
            raise config_error(where, f"matchers.{name}.config", "a key of configs:", key)
        rules.append(QuantRule(pattern, *_read_config(configs[key], f"{where}: configs.{key}")))
    return tuple(rules)


#: a ``TEQuantizationRecipe``'s fields (``extensions/transformer_engine.py``)
RECIPE_FIELDS = ("fp8_quantization_recipe", "fp4_quantization_recipe", "custom_recipe_factory",
                 "fp8_format", "override_quantized_autocast", "override_nonquantized_autocast",
                 "tp_only_amax_red", "fp8_param", "fp4_param")


def _read_config(config: Any, where: str) -> tuple[str, bool, bool]:
    """A ``TEQuantizationParams`` config's training recipe: (precision, the two overrides),
    refused where Megatron-Core refuses it or flowsim does not price it."""
    if not isinstance(config, Mapping) or \
            config.get("transformer_engine_config_type") != "TEQuantizationParams":
        raise ConfigError(f"{where}: expected transformer_engine_config_type: "
                          "TEQuantizationParams (the one kind Megatron-Core parses)")
    extra = set(config) - {"transformer_engine_config_type", "training_recipe",
                           "evaluation_recipe"}
    recipe = config.get("training_recipe")
    if extra or not isinstance(recipe, Mapping):
        raise ConfigError(f"{where}: expected training_recipe: a mapping ({{}}: 16 bits) "
                          f"and at most evaluation_recipe beside it, found {sorted(config)}")
    unknown = set(recipe) - set(RECIPE_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: training_recipe: expected the fields of Megatron-Core's "
                          f"TEQuantizationRecipe, found {sorted(unknown)}")
    fp8, fp4 = recipe.get("fp8_quantization_recipe"), recipe.get("fp4_quantization_recipe")
    if fp8 is not None and fp4 is not None:
        raise ConfigError(f"{where}: expected one of fp8_quantization_recipe and "
                          "fp4_quantization_recipe (Megatron-Core refuses both)")
    if fp8 is not None and fp8 not in ("tensorwise", "mxfp8"):
        raise ConfigError(f"{where}: expected fp8_quantization_recipe tensorwise or mxfp8 "
                          f"(what flowsim prices; Megatron-Core refuses delayed), found {fp8!r}")
    if fp4 is not None and fp4 != "nvfp4":
        raise ConfigError(f"{where}: expected fp4_quantization_recipe nvfp4 (what flowsim "
                          f"prices), found {fp4!r}")
    flags = []
    for key, default in (("override_quantized_autocast", True),
                         ("override_nonquantized_autocast", False)):
        flag = recipe.get(key, default)
        if not isinstance(flag, bool):
            raise ConfigError(f"{where}: expected training_recipe.{key}: true or false, "
                              f"found {flag!r}")
        flags.append(flag)
    if recipe.get("fp8_param") or recipe.get("fp4_param"):
        warnings.warn(f"{where}: fp8_param / fp4_param: the module's weights gathered in low "
                      "precision are not modelled (gathered in the run's)", FlowsimWarning,
                      stacklevel=4)
    return str(fp8 or fp4 or "bf16"), flags[0], flags[1]


# ---------------------------------------------------------------------- each layer's
def run_precision(spec: TransformerSpec) -> str:
    """The run's precision: ``bf16`` (16-bit training) or its FP8 / NVFP4 recipe."""
    return spec.fp8_recipe if spec.dtype == "fp8" else "bf16"


def is_bf16_layer(spec: TransformerSpec, layer: int) -> bool:
    """Whether a decoder layer runs outside the run's FP8 (NVFP4) autocast."""
    return layer < spec.bf16_layers_at_start or \
        spec.layers - spec.bf16_layers_at_end <= layer < spec.layers


def block_context(spec: TransformerSpec, layer: int) -> str:
    """The autocast a decoder layer runs in, or (``layer >= spec.layers``) an MTP depth's
    block: the run's FP8 context, FP4 ignored."""
    run = run_precision(spec)
    if layer >= spec.layers:
        return "bf16" if run == "nvfp4" else run
    return "bf16" if is_bf16_layer(spec, layer) else run


def _depth_layer(spec: TransformerSpec, module: str) -> int:
    """Which layer of a hybrid model's depth (``hybrid_mtp``, e.g. ``*E``) holds a module."""
    kinds = ("*",) if module.startswith("self_attention.") else \
        ("M",) if module.startswith("mixer.") else ("E", "-")
    return next((i for i, c in enumerate(spec.hybrid_mtp) if c in kinds), 0)


def module_context(spec: TransformerSpec, layer: int, module: str) -> str:
    """The autocast a module runs in: its layer's, its depth's block's, or a hybrid depth's
    own layer's (numbered from 0 within the depth, FP4 included)."""
    if layer < spec.layers or module == "eh_proj" or not spec.hybrid_mtp:
        return block_context(spec, layer)
    inner = _depth_layer(spec, module)
    bf16 = inner < spec.bf16_layers_at_start or \
        inner >= spec.layers - spec.bf16_layers_at_end
    return "bf16" if bf16 else run_precision(spec)


def module_path(spec: TransformerSpec, layer: int, module: str) -> str:
    """A module's path in Megatron-Core's model (its index: the layer's place in its
    chunk)."""
    if layer >= spec.layers:
        depth = f"mtp.layers.{0 if spec.mtp_repeated else layer - spec.layers}"
        if module == "eh_proj":
            return f"{depth}.eh_proj"
        inner = f".layers.{_depth_layer(spec, module)}" if spec.hybrid_mtp else ""
        return f"{depth}.mtp_model_layer{inner}.{module}"
    start = 0
    for count in layer_counts(spec):
        if layer < start + count:
            break
        start += count
    return f"decoder.layers.{layer - start}.{module}"


def module_precision(spec: TransformerSpec, layer: int, module: str) -> str:
    """The precision a module of a layer runs in: the first matching rule's, if it may
    override the module's autocast; else the autocast's."""
    context = module_context(spec, layer, module)
    path = module_path(spec, layer, module)
    for rule in spec.quant_recipe:
        if fnmatch.fnmatchcase(path, rule.pattern):
            quantized = context != "bf16"
            allowed = rule.override_quantized if quantized else rule.override_nonquantized
            return rule.precision if allowed else context
    return context


def in_precision(spec: TransformerSpec, layer: int) -> TransformerSpec:
    """``spec`` as a layer's kernels see it: the layer's (or depth block's) autocast as its
    ``dtype`` (16 bits: no FP8 attention or weight gathers) and the modules that differ from
    it in ``module_precision``; ``spec`` itself when nothing differs, or when it is one
    layer's already (its rules cleared: resolving it again changes nothing)."""
    mtp_fp4 = spec.mtp_layers and spec.dtype == "fp8" and spec.fp8_recipe == "nvfp4"
    if spec.module_precision or not (spec.quant_recipe or spec.bf16_layers_at_start
                                     or spec.bf16_layers_at_end or mtp_fp4):
        return spec
    context = block_context(spec, layer)
    modules = tuple((m, p) for m in MODULES
                    if (p := module_precision(spec, layer, m)) != context)
    changes: dict[str, Any] = dict(quant_recipe=(), bf16_layers_at_start=0,
                                   bf16_layers_at_end=0, module_precision=modules)
    if context == "bf16" and spec.dtype == "fp8":
        changes.update(dtype="bf16", fp8_attention=False, fp8_param_gather=False)
    return replace(spec, **changes)


def precision_of(spec: TransformerSpec, module: str) -> tuple[str, Fp8Recipe]:
    """(``dtype``, ``fp8_recipe``) of a module under ``spec`` as :func:`in_precision` made
    it: ``("fp8", recipe)`` for a quantized module, else ``(spec.dtype, spec.fp8_recipe)``
    for 16 bits or the spec's own."""
    for name, precision in spec.module_precision:
        if name == module:
            if precision == "bf16":
                return ("bf16" if spec.dtype == "fp8" else spec.dtype), spec.fp8_recipe
            return "fp8", cast(Fp8Recipe, precision)
    return spec.dtype, spec.fp8_recipe
