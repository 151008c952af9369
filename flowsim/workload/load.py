"""Any workload form into a :class:`~.graph.Workload`: the readers behind one entry point, and
the transformations every form shares (scaling, repeated iterations)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, config_error, public_api
from .astra_text import TextWorkload, read_astra_text
from .graph import Op, Program, Workload
from .training_loops import build_training_loop

WorkloadLike = str | os.PathLike | Workload | TextWorkload | Mapping


@public_api
def load_workload(source: WorkloadLike, network, iterations: int = 1, *,
                  compute_scale: float = 1.0, comm_scale: float = 1.0,
                  comm_groups: Any = None, spmd: bool = False,
                  element_bytes: int | None = None) -> Workload:
    """Any workload form into programs for ``network`` with ``iterations`` iterations.

    Sources: an ASTRA-sim text file (``.txt``), a flowsim YAML graph or generator spec
    (``.yml``/``.yaml`` or a mapping), Chakra traces (``<prefix>.<rank>.et`` files: give the
    prefix, one ``.et`` file or their folder), a parsed :class:`TextWorkload`, a
    :class:`Workload`, or the name of a bundled workload. ``compute_scale`` and
    ``comm_scale`` multiply every compute time and communication size; ``comm_groups`` are
    Chakra communicators, ``spmd`` runs one rank's Chakra trace on every NPU and
    ``element_bytes`` sizes the elements of traces that count them (see
    :func:`~.chakra.load_chakra`). A text ``HYBRID_TRANSFORMER`` may ask for ``network`` with a
    dimension split in two, as ASTRA-sim does: the workload's ``network`` then holds that
    network's config (see :attr:`Workload.network`).
    """
    path = None if isinstance(source, (TextWorkload, Workload, Mapping)) else \
        _workload_path(source)
    chakra = path is not None and path.suffix not in (".txt", ".yml", ".yaml")
    for key, value in (("comm_groups", comm_groups), ("spmd", spmd or None),
                       ("element_bytes", element_bytes)):
        if value is not None and not chakra:
            raise ConfigError(f"argument '{key}': applies to Chakra traces only")
    if isinstance(source, TextWorkload) or (path is not None and path.suffix == ".txt"):
        if isinstance(source, TextWorkload):
            text = source
        else:
            assert path is not None   # a .txt path, by the condition above
            text = read_astra_text(path)
        text = scale_text(text, compute_scale, comm_scale)
        work = build_training_loop(text, network, iterations)
        work.built_for = getattr(network, "config", None)
        return work
    if isinstance(source, Workload):
        work = source
    elif isinstance(source, Mapping):
        from .yaml_graph import parse_workload_mapping

        work = parse_workload_mapping(source, getattr(source, "path", "<dict>"), network)
    elif path is not None and path.suffix in (".yml", ".yaml"):
        from .yaml_graph import read_workload_yaml

        work = read_workload_yaml(path, network)
    elif path is not None and (path.suffix == ".et" or path.is_dir() or not path.exists()):
        from .chakra import load_chakra

        work = load_chakra(path, npus=network.npus, ndims=network.ndims,
                           comm_group=comm_groups, spmd=bool(spmd),
                           element_bytes=element_bytes)
    else:
        raise ConfigError(f"{path}: unknown workload format (expected .txt, .yml/.yaml or "
                          f"Chakra .et files){_json_hint(path)}")
    if work.built_for is None and not isinstance(source, Workload):
        work.built_for = getattr(network, "config", None)
    return repeat_iterations(scale_workload(work, compute_scale, comm_scale), iterations)


def _json_hint(path: Path | None) -> str:
    """What a ``.json`` workload the ecosystem's tools write is, and what to give instead."""
    if path is None or path.suffix != ".json" or not path.is_file():
        return ""
    with path.open("rb") as handle:
        head = handle.read(4096)
    if b'"workload_graph"' in head:
        return ("; this is Chakra's JSON rendering of a trace (its feeder tests' format), "
                "which flowsim does not read: give the .et files it was made from")
    if b'"schema"' in head and b'"nodes"' in head:
        return ("; this is a PyTorch execution trace (host side): link it with its Kineto "
                "trace and convert it with Chakra (chakra_trace_link, then chakra_converter "
                "PyTorch) into .et files, which flowsim reads")
    if b'"model_type"' in head:
        return ("; this is a Hugging Face model config (a model's shape, not a run): give it "
                "as 'config' of a spec with 'generator: huggingface', beside the run's "
                "sequence, global_batch and parallel degrees")
    return ""


def _workload_path(source: str | os.PathLike) -> Path:
    """A workload path, a bundled workload's file, or a Chakra prefix (which need not exist);
    a bare name that is none of them is an error listing the bundled workloads."""
    path = Path(source)
    if path.exists() or path.name != str(source) or path.suffix:
        return path
    from ..resources import bundled_dir, bundled_names

    bundled = [bundled_dir("workload") / (path.name + s) for s in (".txt", ".yml", ".yaml")]
    found = next((p for p in bundled if p.is_file()), None)
    if found is not None:
        return found
    if not any(Path(".").glob(f"{path.name}.*.et")):
        model = path.name in bundled_names("model")
        hint = (f"; {path.name} is a bundled model config: give it as 'config' of a spec "
                "with 'generator: huggingface', beside the run's keys") if model else ""
        raise ConfigError(f"{source}: workload not found (expected a file, Chakra traces "
                          f"'{source}.<rank>.et', or a bundled name: "
                          f"{', '.join(bundled_names('workload'))}){hint}")
    return path


def scale_text(text: TextWorkload, compute_scale: float, comm_scale: float) -> TextWorkload:
    """A text workload with compute times and byte counts multiplied."""
    if compute_scale == 1 and comm_scale == 1:
        return text
    layers = tuple(replace(
        layer, fwd_compute=layer.fwd_compute * compute_scale,
        ig_compute=layer.ig_compute * compute_scale, wg_compute=layer.wg_compute * compute_scale,
        update_delay=layer.update_delay * compute_scale,
        fwd_bytes=int(round(layer.fwd_bytes * comm_scale)),
        ig_bytes=int(round(layer.ig_bytes * comm_scale)),
        wg_bytes=int(round(layer.wg_bytes * comm_scale))) for layer in text.layers)
    return replace(text, layers=layers)


def scale_workload(work: Workload, compute_scale: float, comm_scale: float) -> Workload:
    """A workload with compute (durations, FLOPs, bytes) and communication sizes multiplied."""
    if compute_scale == 1 and comm_scale == 1:
        return work

    def scaled(op: Op) -> Op:
        if op.kind == "compute":
            return replace(op, duration_ns=op.duration_ns * compute_scale,
                           flops=op.flops * compute_scale, mem_bytes=op.mem_bytes * compute_scale)
        if op.kind in ("collective", "send", "recv"):
            return replace(op, size=int(round(op.size * comm_scale)))
        return op

    return replace(work, programs=[Program([scaled(op) for op in p.ops], p.npus, p.source)
                                   for p in work.programs])


def repeat_iterations(workload: Workload, iterations: int) -> Workload:
    """``iterations`` copies of every program's graph, each copy starting after the previous
    one's last ops (its sinks) on that program."""
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise config_error("argument", "iterations", "an integer >= 1", iterations)
    if iterations == 1:
        return workload
    programs = []
    for program in workload.programs:
        ops = program.ops
        span = max((op.id for op in ops), default=-1) + 1
        used = {d for op in ops for d in (*op.deps, *op.ctrl_deps)}
        sinks = tuple(op.id for op in ops if op.id not in used)
        out: list[Op] = []
        for k in range(iterations):
            shift = k * span
            for op in ops:
                ctrl = tuple(d + shift for d in op.ctrl_deps)
                if k and not op.deps and not op.ctrl_deps:
                    ctrl = tuple(s + shift - span for s in sinks)
                out.append(_shifted(op, shift, ctrl))
        programs.append(Program(out, program.npus, program.source))
    return replace(workload, programs=programs)


def _shifted(op: Op, shift: int, ctrl: tuple[int, ...]) -> Op:
    return replace(op, id=op.id + shift, deps=tuple(d + shift for d in op.deps),
                   ctrl_deps=ctrl)


