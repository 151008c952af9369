"""Transformer keys read from another tool's run description, built once the network is known.

The Megatron-LM and NeMo importers (:mod:`.megatron`, :mod:`.nemo`) translate a description
into the transformer generator's keys; the data-parallel size is what the network's NPUs leave
after tensor, pipeline and context parallelism, as the tools' launchers decide it. This module
holds what they share: merging the translated keys with keys given beside them, and building.
"""

from __future__ import annotations

import math
import re
import shlex
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._validate import read_int
from ...errors import ConfigError, FlowsimWarning, config_error
from ..graph import Workload
from ..kernels import FP8_RECIPES
from .shell_vars import joined_lines
from .transformer import build_transformer, parse_transformer
from .transformer_spec import KEYS
from .transformer_values import MAXIMA

#: GPT-2's BPE vocabulary, which both tools' GPT-2 tokenizers use
GPT2_VOCAB = 50257
#: both tools' position embedding types -> the transformer's ``position_embedding``: the
#: rotary kinds rotate queries and keys in every layer; the relative-bias kinds live inside
#: the attention kernel, as ALiBi does
POSITION_EMBEDDING = {"learned_absolute": "learned_absolute", "rope": "rope", "mrope": "rope",
                      "yarn": "rope", "xpos": "rope", "alibi": "alibi", "kerple": "alibi",
                      "sandwich": "alibi", "relative": "alibi", "none": "none"}

#: NeMo's short names of the FP8 recipes (its performance scripts' ``--fp8_recipe``)
FP8_RECIPE_NAMES = {"cs": "tensorwise", "ds": "delayed", "mx": "mxfp8", "ss": "blockwise"}


def position_embedding(value: Any, where: str, name: str,
                       choices: tuple[str, ...] = tuple(POSITION_EMBEDDING)) -> str:
    """The transformer's ``position_embedding`` for a tool's ``value`` of option ``name``,
    one of the tool's ``choices``.

    Raises
    ------
    ConfigError
        ``value`` is not one of ``choices``, naming ``where`` and ``name``.
    """
    if str(value).lower() not in choices:
        raise config_error(where, name, "one of " + ", ".join(choices), value)
    return POSITION_EMBEDDING[str(value).lower()]


#: both tools' spellings of the context-parallel communication types -> ``cp_comm_type``
#: (Megatron-LM writes Transformer Engine's ``all_gather`` ``allgather``)
CP_COMM_SPELLINGS = {"p2p": "p2p", "allgather": "all_gather", "all_gather": "all_gather",
                     "a2a": "a2a"}


def cp_comm_type(value: Any, where: str, name: str, all_gather: str) -> str:
    """The transformer's ``cp_comm_type`` for a tool's ``value`` of option ``name`` (one
    kind, or a list of one per layer); ``all_gather`` is how the tool spells that kind.

    Raises
    ------
    ConfigError
        Another kind (``a2a+p2p``: all-to-alls inside a ring, not modelled), or per-layer
        kinds that differ, naming ``where`` and ``name``.
    """
    if isinstance(value, (list, tuple)) and value:   # per layer (Megatron-Core allows it)
        if len({str(v).lower() for v in value}) > 1:
            raise config_error(where, name, "one type for every layer (flowsim gives all "
                               "layers one)", value if len(value) > 1 else value[0])
        value = value[0]
    if str(value).lower() not in CP_COMM_SPELLINGS:
        raise config_error(where, name, f"p2p, {all_gather} or a2a", value)
    return CP_COMM_SPELLINGS[str(value).lower()]


def cross_entropy_impl(impl: Any, fused: bool, where: str, name: str) -> dict[str, Any]:
    """The transformer's ``cross_entropy_fusion_impl`` for Megatron-Core's
    ``cross_entropy_fusion_impl`` (``native`` or ``te``) named as ``name``: none when not
    given, or without the fusion (Megatron-Core then runs the unfused cross entropy).

    Raises
    ------
    ConfigError
        Another value, naming ``where`` and ``name``.
    """
    if impl is None:
        return {}
    if impl not in ("native", "te"):
        raise config_error(where, name, "native or te", impl)
    return {"cross_entropy_fusion_impl": impl} if fused else {}


def spec_folder(source: str) -> Path:
    """The folder a spec's relative file names are read from: the spec file's, else the
    working directory (a spec given as a mapping)."""
    return Path(source).parent if Path(source).is_file() else Path.cwd()


def read_beside(name: Any, source: str, key: str, what: str) -> tuple[Path, str]:
    """The text of file ``name`` (key ``key``, ``what`` it should be), relative to the spec
    file ``source`` (else to the working directory), and its path for messages."""
    if not isinstance(name, str) or not name:
        raise config_error(source, key, what, name)
    path = spec_folder(source) / name
    try:
        return path, path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{source}: key '{key}': cannot read {path}: {reason}") from None


def shell_words(text: str, source: str, key: str, what: str) -> list[str]:
    """``text`` split into words as a shell would (comments dropped, backslash-newlines
    joined: :func:`~.shell_vars.joined_lines`).

    Raises
    ------
    ConfigError
        An unclosed quote, naming ``source``, ``key`` and ``what`` it should be.
    """
    try:
        return shlex.split(joined_lines(text), comments=True)
    except ValueError as exc:   # an unclosed quote
        raise config_error(source, key, f"{what} shlex can split ({exc})", text[:60]) from None


@dataclass(frozen=True)
class ImportedSpec:
    """Transformer keys read from another tool's configuration, before the network is known
    (the data-parallel size is what its NPUs leave)."""

    keys: tuple[tuple[str, Any], ...]
    source: str
    #: where the keys came from, for messages (``args``, ``config``)
    origin: str
    #: transformer key -> the tool's name for it, for keys read from ``origin``
    names: tuple[tuple[str, str], ...] = ()
    #: settings the tool decides only once the data-parallel size is known:
    #: ``finish(keys)`` with ``keys["dp"]`` set returns the keys to build
    finish: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None,
                                                                       compare=False)

    def build(self, network: Any) -> Workload:
        try:
            return self._build(network)
        except ConfigError as exc:   # name the setting as the user wrote it
            named = re.search(r"key '(\w+)", str(exc))   # 'mla.x', 'moe_layer_freq[1]' too
            tool = dict(self.names).get(named.group(1)) if named else None
            if tool is None:
                raise
            raise ConfigError(f"{exc} (read from {tool} in '{self.origin}')") from None

    def _build(self, network: Any) -> Workload:
        keys = dict(self.keys)
        if "dp" not in keys:
            model = math.prod(read_int(keys, k, source=self.source, minimum=1,
                                       maximum=MAXIMA[k], default=1)
                              for k in ("tp", "pp", "cp"))
            if network.npus % model:
                raise ConfigError(f"{self.source}: {self.origin}: tensor x pipeline x context "
                                  f"parallel = {model} does not divide the network's "
                                  f"{network.npus} NPUs")
            keys["dp"] = network.npus // model
        if self.finish is not None:
            keys = self.finish(keys)
        return build_transformer(network, parse_transformer(keys, self.source))


def parse_imported(values: Mapping[str, Any], source: str, *, read: str,
                   translate: Callable[[Any, str], dict[str, Any]],
                   names: Mapping[str, str],
                   finish: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                   ) -> ImportedSpec:
    """An :class:`ImportedSpec` from ``values``: key ``read`` holds the other tool's
    configuration, which ``translate(value, source)`` turns into transformer keys; every
    other key is a transformer key and wins over the translated ones. ``names`` gives the
    tool's name of a transformer key, for errors; ``finish`` (see :class:`ImportedSpec`)
    completes the keys once the data-parallel size is known."""
    if read not in values:
        raise config_error(source, read, "the configuration to read", None)
    overrides = {k: v for k, v in values.items() if k != read}
    unknown = sorted(set(overrides) - set(KEYS))
    if unknown:
        raise config_error(source, unknown[0], f"'{read}' or a transformer key",
                           overrides[unknown[0]])
    keys = {**translate(values[read], source), **overrides}
    if not keys.get("vocab"):
        warnings.warn(f"{source}: '{read}' gives no vocabulary size: the embedding and output "
                      f"layers are left out (give 'vocab' beside '{read}')", FlowsimWarning,
                      stacklevel=4)
    tool = tuple((k, names[k]) for k in keys if k in names and k not in overrides)
    if finish is not None:   # the keys given beside win over what the tool decides too
        decide = finish
        finish = lambda keys: {**decide(keys), **overrides}  # noqa: E731
    return ImportedSpec(tuple(keys.items()), source, read, tool, finish)


def build_imported(network: Any, spec: ImportedSpec) -> Workload:
    """The workload an :class:`ImportedSpec` describes on ``network``."""
    return spec.build(network)


def causal_window(size: Any, where: str, name: str) -> int:
    """A window size as Megatron-Core's ``window_size`` gives it, ``(left, right)``: the
    keys a query attends back to; a causal model's right side is 0."""
    try:
        left, right = (int(str(x).strip()) for x in size)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name}: expected two integers (left, right), e.g. "
                          f"(128, 0), found {size!r}") from None
    if left < 1 or right != 0:
        raise ConfigError(f"{where}: {name}: expected (left, 0) with left >= 1 (a causal "
                          f"sliding window), found ({left}, {right})")
    return left


def recompute_method_keys(method: Any, count: Any, where: str,
                          names: tuple[str, str]) -> dict[str, Any]:
    """The layers full recomputation re-runs, from Megatron-Core's recompute method and layer
    count (``names``: the tool's names of the two options, for messages).

    ``uniform`` checkpoints groups of ``count`` layers and re-runs every layer; ``block``
    re-runs the first ``count`` layers of each model chunk only (``recompute_layers``).
    Anything else is priced as every layer recomputed, with a warning.
    """
    if method == "uniform" or (method, count) == (None, None):
        return {}
    number = count if isinstance(count, int) else \
        int(count) if isinstance(count, str) and count.strip().isdigit() else None
    if method == "block" and number is not None and number >= 0:
        return {"recompute_layers": number} if number else {"recompute": "none"}
    warnings.warn(f"{where}: {names[0]} {method} {names[1]} {count}: priced as every layer "
                  "recomputed", FlowsimWarning, stacklevel=5)
    return {}


#: Megatron-Core's recompute modules flowsim prices (``--recompute-modules``)
RECOMPUTE_MODULE_NAMES = {"core_attn": "core_attn", "moe_act": "moe_act",
                          "layernorm": "layernorm", "mla_up_proj": "mla_up_proj", "mlp": "mlp",
                          "moe": "moe", "shared_experts": "shared_experts"}


def recompute_modules_keys(modules: Any, where: str, name: str) -> dict[str, Any]:
    """``recompute_modules`` from Megatron-Core's list (``name``: the tool's flag or key; a
    list, or its values in one string); the modules of layers flowsim does not model (Gated
    DeltaNet's, hyper-connections') are left out with a warning, others refused."""
    items = modules.split() if isinstance(modules, str) else modules
    if not isinstance(items, (list, tuple)) or not all(isinstance(m, str) for m in items):
        raise config_error(where, name, "a list of Megatron-Core's recompute modules", modules)
    known = [RECOMPUTE_MODULE_NAMES[m] for m in items if m in RECOMPUTE_MODULE_NAMES]
    other = [m for m in items if m not in RECOMPUTE_MODULE_NAMES]
    unmodelled = [m for m in other if m in ("gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")]
    if len(unmodelled) < len(other):
        raise config_error(where, name, "Megatron-Core's recompute modules (" +
                           ", ".join(sorted(set(RECOMPUTE_MODULE_NAMES))) + ")", other)
    if unmodelled:
        warnings.warn(f"{where}: {name} {' '.join(unmodelled)}: modules of layers flowsim does "
                      "not model, left out", FlowsimWarning, stacklevel=4)
    # an empty list re-runs nothing (Megatron-Core's default, core_attn, is for None)
    return {"recompute_modules": known} if known else {"recompute": "none"}


def fp8_recipe(recipe: object, where: str, name: str) -> str:
    """A framework's FP8 recipe (``name``: its flag or key) as a transformer ``fp8_recipe``:
    NeMo's short names (``cs``, ``ds``, ``mx``) read as theirs, ``blockwise`` (DeepSeek-V3's
    1 x 128 and 128 x 128 blocks, Hopper; NeMo's ``ss``) priced as ``tensorwise`` with a
    warning."""
    spelled = str(recipe).strip().lower()
    recipe = FP8_RECIPE_NAMES.get(spelled, spelled)
    if recipe == "blockwise":
        warnings.warn(f"{where}: {name} blockwise: priced as tensorwise (its casts and GEMMs "
                      "at tensor-scaled FP8's cost)", FlowsimWarning, stacklevel=4)
        return "tensorwise"
    if recipe not in FP8_RECIPES:
        raise config_error(where, name, "delayed, tensorwise, mxfp8, nvfp4 or blockwise",
                           recipe)
    return str(recipe)


def deepep_keys(dispatcher: Any, backend: Any, groups: Any, group_topk: Any,
                keys: Mapping[str, Any], where: str, names: tuple[str, str]
                ) -> dict[str, Any] | None:
    """The keys of Megatron-Core's flex dispatcher with its DeepEP or HybridEP backend
    (``dispatcher: deepep``, and ``node_limit`` with ``routing_groups`` from its
    group-limited routing, ``names``: the flags or keys of its groups), or None for another
    dispatcher (or no experts to dispatch across ranks)."""
    if dispatcher != "flex" or backend not in ("deepep", "hybridep") or \
            not keys.get("experts") or keys.get("ep", 1) <= 1:
        return None
    return {"dispatcher": "deepep", **routing_limit(groups, group_topk, where, names)}


def routing_limit(groups: Any, group_topk: Any, where: str, names: tuple[str, str]
                  ) -> dict[str, int]:
    """``node_limit`` and ``routing_groups`` from Megatron-Core's group-limited routing
    (``names``: its number of groups and the groups a token may use), or nothing without a
    limit (none given, 0 as Megatron-Core reads it, or every group allowed).

    Raises
    ------
    ConfigError
        A count that is not a positive whole number, or more groups allowed than there are.
    """
    if group_topk is None or str(group_topk).strip() == "0":   # Megatron-Core: no limit
        return {}
    numbers = []
    for name, value in zip(names, (groups, group_topk)):
        whole = isinstance(value, int) and not isinstance(value, bool) or \
            isinstance(value, str) and value.strip().isdigit()
        if not whole or not int(value):
            raise config_error(where, name, f"a positive whole number (Megatron-Core needs "
                               f"both {names[0]} and {names[1]})", value)
        numbers.append(int(value))
    groups, limit = numbers
    if limit > groups:
        raise config_error(where, names[1], f"at most the {groups} groups of {names[0]}",
                           limit)
    return {} if limit == groups else {"node_limit": limit, "routing_groups": groups}


def lora_keys(rank: Any, names: Any, where: str, *, rank_key: str, names_key: str,
              layers: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """LoRA's ``lora_rank`` and ``lora_targets`` from a tool's adapter rank and target
    names (``rank_key``, ``names_key``: the tool's keys, for errors; ``layers``: the layers
    each name adapts), each layer once, in the order named.

    Raises
    ------
    ConfigError
        A rank that is not a positive integer, no list of names, or a name ``layers`` does
        not hold, naming the key.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise config_error(where, rank_key, "a positive integer", rank)
    if isinstance(names, str) or not isinstance(names, list | tuple) or not names:
        raise config_error(where, names_key, f"a list of {', '.join(layers)}", names)
    targets: list[str] = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or name not in layers:
            raise config_error(where, f"{names_key}[{i}]", f"one of {', '.join(layers)}", name)
        targets += [t for t in layers[name] if t not in targets]
    return {"lora_rank": rank, "lora_targets": targets}


def packed_warning(where: str, key: str) -> None:
    """Warn that packed sequences (``key`` says so) are priced whole: the documents' length
    is the data's, which no config holds."""
    warnings.warn(f"{where}: {key}: the documents' length is the data's; priced as whole "
                  "sequences (give 'document_tokens' beside 'config')", FlowsimWarning,
                  stacklevel=5)


def renamed(message: str, paths: Mapping[str, str]) -> str:
    """``message`` with each of ``paths``' keys (another importer's setting paths, whole
    words) written as its value: an importer that reads through another names its own."""
    for old, new in sorted(paths.items(), key=lambda item: -len(item[0])):
        message = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, message)
    return message


def flag_int(flags: Mapping[str, str | None], where: str, flag: str) -> int | None:
    """A command-line flag's integer value (None: not given).

    Raises
    ------
    ConfigError
        The value is not an integer, naming the flag.
    """
    value = flags.get(flag)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise config_error(where, f"--{flag}", "an integer", value) from None
