"""``flowsim.simulate``: a workload on a platform, end to end, as an xarray Dataset."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .._version import __version__
from ..errors import ConfigError, config_error
from ..network.engine import check_model
from ..system import SystemConfig, load_system
from ..topology import Network, load_network
from .astra_text import TextWorkload, read_astra_text
from .engine import RunRecord, run_workload
from .graph import PASSES, Op, Program, Workload
from .memory import load_memory
from .training_loops import build_training_loop
from .validate import check_workload

WorkloadLike = str | os.PathLike | Workload | TextWorkload | Mapping


def load_workload(source: WorkloadLike, network: Network, iterations: int = 1, *,
                  compute_scale: float = 1.0, comm_scale: float = 1.0,
                  comm_groups: Any = None) -> tuple[Workload, Network]:
    """Any workload form into programs for ``network`` with ``iterations`` iterations.

    Sources: an ASTRA-sim text file (``.txt``), a flowsim YAML graph or generator spec
    (``.yml``/``.yaml`` or a mapping), Chakra traces (``<prefix>.<rank>.et`` files: give the
    prefix, one ``.et`` file or their folder), a parsed :class:`TextWorkload`, a
    :class:`Workload`, or the name of a bundled workload. ``compute_scale`` and
    ``comm_scale`` multiply every compute time and communication size; ``comm_groups`` are
    Chakra communicators. Returns the workload and the network it runs on (a text
    ``HYBRID_TRANSFORMER`` may split a dimension, as ASTRA-sim does).
    """
    path = None if isinstance(source, (TextWorkload, Workload, Mapping)) else \
        _workload_path(source)
    if comm_groups is not None and (path is None or path.suffix in (".txt", ".yml", ".yaml")):
        raise ConfigError("argument 'comm_groups': communicator groups apply to Chakra traces "
                          "only")
    if isinstance(source, TextWorkload) or (path is not None and path.suffix == ".txt"):
        text = source if path is None else read_astra_text(path)
        text = scale_text(text, compute_scale, comm_scale)
        return build_training_loop(text, network, iterations)
    if isinstance(source, Workload):
        work = source
    elif isinstance(source, Mapping):
        from .yaml_graph import parse_workload_mapping

        work = parse_workload_mapping(source, "<dict>", network)
    elif path.suffix in (".yml", ".yaml"):
        from .yaml_graph import read_workload_yaml

        work = read_workload_yaml(path, network)
    elif path.suffix == ".et" or path.is_dir() or not path.exists():
        from .chakra import load_chakra

        work = load_chakra(path, npus=network.npus, ndims=network.ndims,
                           comm_group=comm_groups)
    else:
        raise ConfigError(f"{path}: unknown workload format (expected .txt, .yml/.yaml or "
                          "Chakra .et files)")
    return repeat_iterations(scale_workload(work, compute_scale, comm_scale),
                             iterations), network


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
        raise ConfigError(f"{source}: workload not found (expected a file, Chakra traces "
                          f"'{source}.<rank>.et', or a bundled name: "
                          f"{', '.join(bundled_names('workload'))})")
    return path


def scale_text(text: TextWorkload, compute_scale: float, comm_scale: float) -> TextWorkload:
    """A text workload with compute times and byte counts multiplied."""
    if compute_scale == 1 and comm_scale == 1:
        return text
    from dataclasses import replace

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
    from dataclasses import replace

    def scaled(op: Op) -> Op:
        if op.kind == "compute":
            return replace(op, duration_ns=op.duration_ns * compute_scale,
                           flops=op.flops * compute_scale, mem_bytes=op.mem_bytes * compute_scale)
        if op.kind in ("collective", "send", "recv"):
            return replace(op, size=int(round(op.size * comm_scale)))
        return op

    return Workload([Program([scaled(op) for op in p.ops], p.npus, p.source)
                     for p in work.programs], work.layers, work.name)


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
    return Workload(programs, workload.layers, workload.name)


def _shifted(op: Op, shift: int, ctrl: tuple[int, ...]) -> Op:
    from dataclasses import replace

    return replace(op, id=op.id + shift, deps=tuple(d + shift for d in op.deps),
                   ctrl_deps=ctrl)


def simulate(network: Any, workload: WorkloadLike, system: Any = None,
             model: str = "analytical", iterations: int = 1, *,
             compute_scale: float = 1.0, comm_scale: float = 1.0,
             speed: Any = None, roofline: Any = None, memory: Any = None,
             collective_streams: int | None = None, comm_groups: Any = None,
             trace: str | os.PathLike | None = None) -> xr.Dataset:
    """Simulate a training workload and return its timing as an :class:`xarray.Dataset`.

    Parameters
    ----------
    network : path, bundled name, mapping, NetworkConfig or Network
        2.x YAML, 1.0 analytical JSON, fabric or InfraGraph (see :func:`load_network`).
    workload : path, mapping, TextWorkload or Workload
        See :func:`load_workload`.
    system : path, bundled name, mapping, SystemConfig or None
        2.x json or 1.0 txt system config.
    model : {"analytical", "flow"}
    iterations : int
        Training iterations (ASTRA-sim's ``--num-passes``; for ``MICRO``, concurrent copies).
    compute_scale, comm_scale : float
        Multiply a text workload's compute cycles (1 cycle = 1 ns at ASTRA-sim's 1 GHz
        clock) and byte counts, like ASTRA-sim's ``--compute-scale`` / ``--comm-scale``.
    speed : float or array of shape (npus,)
        Compute speed factor per NPU (0.5: a straggler taking twice as long).
    roofline : Roofline or mapping, optional
        Times compute ops given as FLOPs and bytes (``peak_tflops``, ``memory_bandwidth_GBps``,
        ``efficiency``).
    memory : path, mapping or MemoryConfig, optional
        Remote-memory config for memory ops (ASTRA-sim's remote-memory json).
    collective_streams : int, optional
        Cap on collectives a program has in flight (default: none beyond the system's
        dimension queues, ASTRA-sim's behaviour).
    comm_groups : path or mapping, optional
        Chakra communicator groups ``{"<pg_name>": [ranks]}``.
    trace : path, optional
        Write a Chrome-trace / Perfetto timeline of ops and collectives there.

    Returns
    -------
    xarray.Dataset
        ``time_ns`` (when the last iteration and every collective it issued have finished);
        per NPU ``finish_ns`` (its last op or collective), ``compute_ns``,
        ``exposed_comm_ns`` (communication not hidden by compute: time blocked waiting for it,
        plus collectives still running after the NPU's last op), ``blocked_comm_ns`` (the
        blocked part only, ASTRA-sim 1.0's per-layer definition) and ``idle_ns`` (the rest:
        memory, one-cycle transitions, waiting for other NPUs' compute); per layer and pass
        (``fwd``/``ig``/``wg``) ``layer_compute_ns``, ``layer_exposed_comm_ns`` and
        ``layer_comm_ns`` (issue to finish plus update delay of the layer's collectives),
        averaged over the NPUs that run them; per dimension ``dim_bytes`` and ``dim_busy_ns``.
    """
    net = load_network(network)
    sys_cfg = load_system(system)
    model = check_model(model)
    for key, value in (("compute_scale", compute_scale), ("comm_scale", comm_scale)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not np.isfinite(value) or value < 0:
            raise config_error("argument", key, "a non-negative number", value)
    work, net = load_workload(workload, net, iterations, compute_scale=compute_scale,
                              comm_scale=comm_scale, comm_groups=comm_groups)
    rl = _roofline(roofline)
    check_workload(work, net, roofline=rl is not None)
    speeds = _speeds(speed, net.npus)
    record = run_workload(net, work, sys_cfg, model, speed=speeds, roofline=rl,
                          memory=load_memory(memory), collective_streams=_streams(
                              collective_streams), timeline=trace is not None)
    if trace is not None:
        from .outputs import write_workload_trace

        write_workload_trace(record, work, trace)
    return workload_dataset(record, net, sys_cfg, model, work, iterations)


def _speeds(speed: Any, npus: int) -> np.ndarray:
    if speed is None:
        return np.ones(npus)
    try:
        arr = np.broadcast_to(np.asarray(speed, dtype=float), (npus,)).copy()
    except (TypeError, ValueError):
        raise config_error("argument", "speed", f"a positive number or {npus} of them",
                           speed) from None
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise config_error("argument", "speed", "positive finite speed factors", speed)
    return arr


def _roofline(roofline: Any):
    if roofline is None:
        return None
    from .roofline import Roofline, parse_roofline

    if isinstance(roofline, Roofline):
        return roofline
    if isinstance(roofline, Mapping):
        return parse_roofline(roofline, "argument 'roofline'")
    raise config_error("argument", "roofline", "a Roofline or a mapping", roofline)


def _streams(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise config_error("argument", "collective_streams", "an integer >= 1", value)
    return value


def workload_dataset(record: RunRecord, network: Network, system: SystemConfig, model: str,
                     workload: Workload, iterations: int) -> xr.Dataset:
    """Assemble the Dataset of one workload run (see :func:`simulate`)."""
    layers = list(workload.layers) + ["(other)"]
    keep = np.ones(len(layers), bool)
    keep[-1] = bool(record.layer_compute_ns[-1].any() or record.layer_exposed_ns[-1].any()
                    or record.layer_comm_ns[-1].any())
    cfg = network.config
    per_link = len(cfg.bandwidth_gbps) != network.ndims or cfg.topology[0] == "Fabric"
    total = float(record.time_ns)
    idle = np.maximum(record.npu_finish_ns - record.npu_compute_ns - record.npu_exposed_ns, 0)
    ds = xr.Dataset(
        data_vars={
            "time_ns": ((), total),
            "finish_ns": (("npu",), record.npu_finish_ns),
            "compute_ns": (("npu",), record.npu_compute_ns),
            "exposed_comm_ns": (("npu",), record.npu_exposed_ns),
            "blocked_comm_ns": (("npu",), record.npu_blocked_ns),
            "idle_ns": (("npu",), idle),
            "layer_compute_ns": (("layer", "pass"), record.layer_compute_ns[keep]),
            "layer_exposed_comm_ns": (("layer", "pass"), record.layer_exposed_ns[keep]),
            "layer_comm_ns": (("layer", "pass"), record.layer_comm_ns[keep]),
            # a fabric's links belong to no logical dimension: unknown, as for collectives
            "dim_bytes": (("dim",), np.full(network.ndims, np.nan) if per_link
                          else record.dim_bytes),
            "dim_busy_ns": (("dim",), record.dim_busy_ns),
        },
        coords={
            "npu": np.arange(network.npus),
            "layer": np.array(layers, dtype=str)[keep],
            "pass": np.array(PASSES, dtype=str),
            "dim": np.arange(network.ndims),
            "topology": (("dim",), np.array(cfg.topology[: network.ndims] if not per_link
                                            else ["Fabric"] * network.ndims, dtype=str)),
            "npus_count": (("dim",), np.array(network.dims)),
        },
        attrs={
            "workload": workload.name,
            "model": model,
            "iterations": int(iterations),
            "npus": int(network.npus),
            # ASTRA-sim 1.0's "total exposed comm": end time minus compute (NPU 0)
            "exposed_comm_total_ns": total - float(record.npu_compute_ns[0]),
            "collectives": int(record.collectives),
            "messages": int(record.messages),
            "chunks_per_collective": int(system.splits),
            "flowsim_version": __version__,
            "stats": json.dumps(record.stats),
        },
    )
    for name in ds.data_vars:
        ds[name].attrs["units"] = "bytes" if name == "dim_bytes" else "ns"
    return ds
