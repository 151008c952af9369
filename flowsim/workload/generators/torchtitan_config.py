"""torchtitan's job config as :mod:`.torchtitan` reads it: the TOML file (or the mapping
itself), the command-line items over it, and each setting where it is set.

torchtitan's TOML era had two layouts (``torchtitan/config_manager.py``): 2024's degrees
under ``[training]`` and ``[experimental]`` (commit 9dec370), 2025's ``[parallelism]``
section (e7c0cae); :data:`SETTINGS` names each setting's paths, newest first, and its
default. Its command line (argparse, later tyro) takes ``--section.key=value``,
``--section.key value``, a bare ``--section.key`` for true and tyro's
``--section.no-key`` for false; dashes and underscores alike.
"""

from __future__ import annotations

import copy
import tomllib
import warnings
from collections.abc import Mapping
from typing import Any

import yaml

from ..._validate import as_bool, as_int
from ...errors import ConfigError, FlowsimWarning, config_error
from .config_files import nested_block, override_items
from .imported import read_beside

#: each setting -> its paths, newest layout first, and torchtitan's default
SETTINGS: dict[str, tuple[tuple[str, ...], Any]] = {
    "name": (("model.name",), "llama3"),
    "flavor": (("model.flavor",), "debugmodel"),
    "seq_len": (("training.seq_len",), 2048),
    "local_batch": (("training.local_batch_size", "training.batch_size"), 8),
    "global_batch": (("training.global_batch_size",), -1),
    "compile": (("compile.enable", "training.compile"), False),
    "compile_components": (("compile.components",), ["model", "loss"]),
    "param_dtype": (("training.mixed_precision_param",), "bfloat16"),
    "reduce_dtype": (("training.mixed_precision_reduce",), "float32"),
    "dp_replicate": (("parallelism.data_parallel_replicate_degree",
                      "training.data_parallel_replicate_degree"), 1),
    "dp_shard": (("parallelism.data_parallel_shard_degree",
                  "training.data_parallel_shard_degree"), -1),
    "reshard": (("parallelism.fsdp_reshard_after_forward",), "default"),
    "tp": (("parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"), 1),
    "async_tp": (("parallelism.enable_async_tensor_parallel",
                  "experimental.enable_async_tensor_parallel"), False),
    "pp": (("parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"),
           1),
    "schedule": (("parallelism.pipeline_parallel_schedule",
                  "experimental.pipeline_parallel_schedule"), "1F1B"),
    "pp_micro_batch": (("parallelism.pipeline_parallel_microbatch_size",), 1),
    "pp_micro_batches": (("parallelism.pipeline_parallel_microbatches",
                          "experimental.pipeline_parallel_microbatches"), None),
    "layers_per_stage": (("parallelism.pipeline_parallel_layers_per_stage",), None),
    "split_points": (("parallelism.pipeline_parallel_split_points",
                      "experimental.pipeline_parallel_split_points"), []),
    "cp": (("parallelism.context_parallel_degree", "experimental.context_parallel_degree"), 1),
    "ep": (("parallelism.expert_parallel_degree",), 1),
    "etp": (("parallelism.expert_tensor_parallel_degree",), 1),
    "cp_rotate": (("parallelism.context_parallel_rotate_method",
                   "experimental.context_parallel_rotate_method"), "allgather"),
    "ac_mode": (("activation_checkpoint.mode",), "selective"),
    "ac_option": (("activation_checkpoint.selective_ac_option",), "2"),
    "converters": (("model.converters",), []),
    "float8_linear": (("float8.enable_float8_linear",), False),
    "fp8_gather": (("quantize.linear.float8.enable_fsdp_float8_all_gather",
                    "float8.enable_fsdp_float8_all_gather"), False),
    "recipe": (("quantize.linear.float8.recipe_name", "float8.recipe_name"), None),
}
#: settings whose command-line value is a comma-separated list
LISTS = frozenset({"model.converters", "compile.components",
                   "parallelism.pipeline_parallel_split_points",
                   "experimental.pipeline_parallel_split_points", "float8.filter_fqns",
                   "quantize.linear.float8.filter_fqns"})
def load_job_config(config: Any, source: str) -> tuple[str, Mapping[str, Any]]:
    """The job config mapping (``config`` itself, or the TOML file it names relative to the
    spec file ``source``) and where it came from, for messages."""
    if isinstance(config, Mapping):
        return f"{source}: config", config
    path, text = read_beside(config, source, "config", "a torchtitan job config: a path to "
                             "its TOML file or a mapping")
    try:
        return str(path), tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def apply_cli(config: Mapping[str, Any], overrides: Any, source: str) -> dict[str, Any]:
    """``config`` with torchtitan's command-line items applied (values read as YAML
    scalars; a list setting's value split at commas)."""
    out = copy.deepcopy(dict(config))
    if overrides is None:
        return out
    words = override_items(overrides, source, "torchtitan's command-line items "
                           "(--training.local_batch_size=2)")
    i = 0
    while i < len(words):
        name, equals, value = words[i].partition("=")
        if not name.startswith("--") or "." not in name:
            raise config_error(source, "overrides", "torchtitan's items, each "
                               "--section.key[=value] (torchrun's own options are not "
                               "torchtitan's)", words[i])
        path = name[2:].replace("-", "_").split(".")
        values = [value] if equals else []
        while not equals and i + 1 < len(words) and not words[i + 1].startswith("--"):
            i += 1
            values.append(words[i])
        i += 1
        parsed: Any
        if path[-1].startswith("no_") and not values:   # tyro's negated flag
            path[-1], parsed = path[-1][3:], False
        elif ".".join(path) in LISTS:
            parsed = [part for v in values for part in v.split(",") if part]
        elif not values:
            parsed = True
        else:
            parsed = [_scalar(v) for v in values] if len(values) > 1 else _scalar(values[0])
        if path != ["job", "config_file"]:   # the file 'config' names
            nested_block(out, path[:-1])[path[-1]] = parsed
    return out


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


class JobConfig:
    """The settings of one job config, each read where it is set (newest layout first)."""

    def __init__(self, config: Mapping[str, Any], where: str) -> None:
        self.config, self.where = config, where

    def path(self, setting: str) -> str:
        paths, _ = SETTINGS[setting]
        return next((p for p in paths if self._lookup(p) is not None), paths[0])

    def __call__(self, setting: str) -> Any:
        value = self._lookup(self.path(setting))
        return SETTINGS[setting][1] if value is None else value

    def _lookup(self, path: str) -> Any:
        node: Any = self.config
        for part in path.split("."):
            if not isinstance(node, Mapping):
                return None
            node = node.get(part)
        return node

    def int(self, setting: str, minimum: int = 1) -> int:
        return as_int(self(setting), source=self.where, key=self.path(setting),
                      minimum=minimum)

    def bool(self, setting: str) -> bool:
        return as_bool(self(setting), source=self.where, key=self.path(setting))

    def choice(self, setting: str, choices: Mapping[str, Any]) -> Any:
        value = self(setting)
        if not isinstance(value, str) or value not in choices:
            raise config_error(self.where, self.path(setting), "one of " + ", ".join(choices),
                               value)
        return choices[value]

    def warn(self, setting: str, text: str) -> None:
        warnings.warn(f"{self.where}: {self.path(setting)} {text}", FlowsimWarning,
                      stacklevel=5)


