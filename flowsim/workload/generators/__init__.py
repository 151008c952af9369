"""Workload generators: common training models from a handful of numbers.

A generator turns validated parameters into a :class:`~flowsim.workload.graph.Workload` for a
given network, with compute times from a roofline. Each one is a module with a ``parse_*``
function (mapping → frozen spec, errors naming the file and key) and a ``build_*`` function
(spec + network → workload); adding a generator is one module and one line in
:data:`GENERATORS`.

From YAML::

    generator: transformer
    layers: 96
    hidden: 12288
    sequence: 2048
    micro_batch: 1
    micro_batches: 64
    tp: 8
    dp: 16
    pp: 8
    roofline: {peak_tflops: 312, memory_bandwidth_GBps: 2039, efficiency: 0.5}

The keys are the keyword arguments of :func:`transformer` or :func:`dlrm`.
``generator: megatron`` (:mod:`.megatron`) reads a Megatron-LM command line and
``generator: nemo`` (:mod:`.nemo`) a NeMo 1 training config, ``generator: nemo2``
(:mod:`.nemo2`) a NeMo 2 pre-training recipe, ``generator: megatron_bridge``
(:mod:`.megatron_bridge`) a Megatron-Bridge run's saved ``run_config.yaml``,
``generator: llmfoundry`` (:mod:`.llmfoundry`) an LLM Foundry training YAML and
``generator: torchtitan`` (:mod:`.torchtitan`) a torchtitan job config into the transformer's
keys;
``generator: huggingface`` (:mod:`.huggingface`) takes a model's shape from its Hugging Face
``config.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, config_error
from ..graph import Workload
from .dlrm import DLRMSpec, build_dlrm, dlrm, parse_dlrm
from .huggingface import parse_huggingface
from .imported import build_imported
from .llmfoundry import parse_llmfoundry
from .megatron import parse_megatron
from .megatron_bridge import parse_megatron_bridge, saved_run_spec
from .nemo import parse_nemo
from .nemo2 import parse_nemo2
from .torchtitan import parse_torchtitan
from .transformer import (
    TransformerSpec,
    build_transformer,
    parse_transformer,
    stage_schedule,
    transformer,
)


@dataclass(frozen=True)
class Generator:
    """One registered generator: validate a mapping, then build from the validated spec."""

    parse: Callable[[Mapping[str, Any], str], Any]
    build: Callable[[Any, Any], Workload]


#: Generators by the name a spec's ``generator`` key gives.
GENERATORS: dict[str, Generator] = {
    "transformer": Generator(parse_transformer, build_transformer),
    "dlrm": Generator(parse_dlrm, build_dlrm),
    "megatron": Generator(parse_megatron, build_imported),
    "nemo": Generator(parse_nemo, build_imported),
    "llmfoundry": Generator(parse_llmfoundry, build_imported),
    "nemo2": Generator(parse_nemo2, build_imported),
    "megatron_bridge": Generator(parse_megatron_bridge, build_imported),
    "torchtitan": Generator(parse_torchtitan, build_imported),
    "huggingface": Generator(parse_huggingface, build_imported),
}


def generator_spec(mapping: Mapping[str, Any], source: str) -> Mapping[str, Any] | None:
    """The generator spec a workload mapping stands for: itself when it names a
    ``generator``, the ``megatron_bridge`` spec of a Megatron-Bridge ``run_config.yaml``
    given as it is saved (:func:`~.megatron_bridge.saved_run_spec`), else ``None``."""
    if "generator" in mapping:
        return mapping
    return saved_run_spec(mapping, source)


def build_generator(spec: Mapping[str, Any], source: str, network: Any) -> Workload:
    """Build the workload a generator spec describes.

    Parameters
    ----------
    spec : Mapping
        ``generator: <name>`` and that generator's keyword arguments (``roofline`` as a
        nested mapping, ``dims`` as a mapping of lists).
    source : str
        Where the spec came from (a file path or ``"<dict>"``), for error messages.
    network : Network
        The built network the workload runs on.

    Raises
    ------
    ConfigError
        An unknown generator or key, a bad value, or parallel degrees that do not fit the
        network; the message names ``source`` and the key.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{source}: expected a mapping of generator keys, "
                          f"found {type(spec).__name__}")
    name = spec.get("generator", ...)
    if not isinstance(name, str) or name not in GENERATORS:
        raise config_error(source, "generator", "one of " + ", ".join(sorted(GENERATORS)),
                           name)
    generator = GENERATORS[name]
    params = {key: value for key, value in spec.items() if key != "generator"}
    return generator.build(network, generator.parse(params, source))


__all__ = ["GENERATORS", "DLRMSpec", "Generator", "TransformerSpec", "build_dlrm",
           "build_generator", "build_transformer", "dlrm", "generator_spec", "parse_dlrm",
           "parse_transformer", "stage_schedule", "transformer"]
