"""``simulate``: a training workload on a platform, end to end, as an xarray Dataset."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

from .._gc_pause import gc_paused
from .._validate import as_bool
from ..compute import ComputeModel, DeviceModel
from ..errors import ConfigError, config_error, public_api
from ..network.models import check_model
from ..results.workload import WorkloadRun
from ..topology import load_network
from ..workload.load import WorkloadLike, load_workload
from ..workload.memory import load_memory
from ..workload.validate import check_workload
from .budget import check_max_work, check_work, workload_work
from .load import system_for
from .split_dims import logical_system
from .workload_engine import run_workload

if TYPE_CHECKING:
    import xarray as xr


@public_api
def simulate(network: Any, workload: WorkloadLike, system: Any = None,
             model: str = "analytical", iterations: int = 1, *,
             compute_scale: float = 1.0, comm_scale: float = 1.0,
             speed: Any = None, roofline: Any = None, memory: Any = None,
             collective_streams: int | None = None, comm_groups: Any = None,
             trace: str | os.PathLike | None = None, replay: bool = True,
             device: Any = None, max_work: float | None = None, spmd: bool = False,
             element_bytes: int | None = None, symmetry: bool = True) -> xr.Dataset:
    """Simulate a training workload and return its timing as an :class:`xarray.Dataset`.

    Parameters
    ----------
    network : path, bundled name, mapping, NetworkConfig or Network
        2.x YAML, 1.0 analytical JSON, fabric or InfraGraph (see :func:`load_network`).
    workload : path, mapping, TextWorkload or Workload
        See :func:`load_workload`.
    system : path, bundled name, mapping, SystemConfig or None
        2.x json or 1.0 txt system config; ``None``: the network's own (a ``cluster:``
        network's is the bundled ``nccl``), else the defaults of :class:`SystemConfig`.
    model : {"analytical", "flow"}
    iterations : int
        Training iterations (ASTRA-sim's ``--num-passes``; for ``MICRO``, concurrent copies).
    compute_scale, comm_scale : float
        Multiply every compute time (a text workload's cycles: 1 cycle = 1 ns at ASTRA-sim's
        1 GHz clock) and every communication size, in any workload format, like ASTRA-sim's
        ``--compute-scale`` / ``--comm-scale``.
    speed : float or array of shape (npus,)
        Compute speed factor per NPU (0.5: a straggler taking twice as long).
    roofline : Roofline or mapping, optional
        Times compute ops given as FLOPs and bytes or kernels on a roofline (``peak_tflops``,
        ``memory_bandwidth_GBps``, ``efficiency``).
    device : str or Device, optional
        Times compute ops from their kernels' shapes on an accelerator preset
        (:data:`flowsim.compute.DEVICES`, e.g. ``"h100"``). Without ``device`` and
        ``roofline``: the compute model the workload names (a generator's ``device`` or
        ``roofline``), else the network's (a ``cluster:`` block's device).
    memory : path, mapping or MemoryConfig, optional
        Remote-memory config for memory ops (ASTRA-sim's remote-memory json).
    collective_streams : int, optional
        Cap on collectives a program has in flight (default: none beyond the system's
        dimension queues, ASTRA-sim's behaviour).
    comm_groups : path or mapping, optional
        Chakra communicator groups ``{"<pg_name>": [ranks]}``.
    spmd : bool
        Chakra: run one rank's trace on every NPU (its default communicator spans them all;
        a communicator of the groups file keeps its size and stride, see
        :mod:`flowsim.workload.chakra_spmd`).
    element_bytes : int, optional
        Chakra traces whose sizes count elements (symbolic_tensor_graph's): bytes per
        element (default 2).
    trace : path, optional
        Write a Chrome-trace / Perfetto timeline of ops and collectives there.
    replay : bool
        Flow model: replay steps and phases whose links carry nothing else from their solution
        alone (exact, and the default); ``False`` puts every flow into the engine, for checks.
    symmetry : bool
        Flow model: time one flow per orbit of the run's symmetries (the data-, tensor- and
        context-parallel replicas of a pipeline stage; exact, and the default, see
        :mod:`flowsim.system.quotient`); ``False`` times every flow, for checks. Every flow
        is timed anyway with ``replay=False``, under per-NPU synchronisation and with
        custom collective algorithms.
    max_work : float, optional
        Work budget (default :data:`~flowsim.system.budget.DEFAULT_MAX_WORK`); a run estimated
        above it is refused before it starts (see :mod:`flowsim.system.budget`).

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
    return run_training(network, workload, system, model, iterations,
                        compute_scale=compute_scale, comm_scale=comm_scale, speed=speed,
                        roofline=roofline, memory=memory,
                        collective_streams=collective_streams, comm_groups=comm_groups,
                        trace=trace, replay=replay, device=device, max_work=max_work,
                        spmd=spmd, element_bytes=element_bytes,
                        symmetry=symmetry).to_dataset()


@public_api
@gc_paused()
def run_training(network: Any, workload: WorkloadLike, system: Any = None,
                 model: str = "analytical", iterations: int = 1, *,
                 compute_scale: float = 1.0, comm_scale: float = 1.0,
                 speed: Any = None, roofline: Any = None, memory: Any = None,
                 collective_streams: int | None = None, comm_groups: Any = None,
                 trace: str | os.PathLike | None = None, replay: bool = True,
                 device: Any = None, max_work: float | None = None, spmd: bool = False,
                 element_bytes: int | None = None, symmetry: bool = True) -> WorkloadRun:
    """Simulate a training workload and return the run (:class:`~flowsim.results.
    WorkloadRun`): its record as plain arrays, without building a Dataset or importing
    xarray; ``.to_dataset()`` is what :func:`simulate` returns, ``.summary()`` the headline
    numbers. For one process per point, or an optimizer's inner loop.

    Takes the parameters of :func:`simulate`.
    """
    budget = check_max_work(max_work)
    symmetry = as_bool(symmetry, source="argument", key="symmetry")
    replay = as_bool(replay, source="argument", key="replay")
    net = load_network(network)
    sys_cfg = system_for(system, net)
    model = check_model(model)
    for key, value in (("compute_scale", compute_scale), ("comm_scale", comm_scale)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not np.isfinite(value) or value < 0:
            raise config_error("argument", key, "a non-negative number", value)
    work = load_workload(workload, net, iterations, compute_scale=compute_scale,
                         comm_scale=comm_scale, comm_groups=comm_groups, spmd=spmd,
                         element_bytes=element_bytes)
    _check_built_for(work, net)
    compute = _compute_model(device, roofline, work, net)   # the physical network's device
    if work.network is not None:   # the workload runs on a re-shaped network
        physical = net.config.npus_count
        net = _reshaped(work, net)
        sys_cfg = logical_system(sys_cfg, physical, net.config.npus_count,
                                 getattr(net, "parents", None))
    check_workload(work, net, roofline=compute is not None)
    # the flow model times a quotient of the run, at least as small as one group per
    # dimension, unless told to time every flow
    replicable = net.replicable and sys_cfg.synchronization == "barrier" and \
        (model == "analytical" or symmetry)
    check_work(workload_work(net, sys_cfg, work, replicable), budget, "run")
    speeds = _speeds(speed, net.npus)
    record = run_workload(net, work, sys_cfg, model, speed=speeds, compute=compute,
                          memory=load_memory(memory), collective_streams=_streams(
                              collective_streams), timeline=trace is not None, replay=replay,
                          symmetry=symmetry)
    if trace is not None:
        from ..results.trace import workload_trace, write_trace

        write_trace(workload_trace(record.timeline, work), trace)
    device = getattr(compute, "device", None)   # a device preset knows its memory
    return WorkloadRun(record, net, sys_cfg, model, work, iterations,
                       peak_flops=compute.peak_flops if compute is not None else None,
                       memory_gib=getattr(device, "memory_gb", None))   # HBM's GB: GiB


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


def _check_built_for(work, net) -> None:
    """A workload built for a network of other dimensions names its collectives' dimensions
    by that network's: refuse it."""
    built = tuple(getattr(work.built_for, "npus_count", ()) or ())
    if built and built != tuple(net.config.npus_count):
        raise ConfigError(f"the workload was built for a network of dims {list(built)}, this "
                          f"one has {list(net.config.npus_count)}: build it for this network "
                          f"(give its source)")


def _reshaped(work, net):
    """The re-shaped network a workload runs on, given the network ``net`` to run it on: its
    own when it was built for ``net``; for a workload built for another network of ``net``'s
    shape (an optimizer building it once), its view of ``net``."""
    if work.built_for is None or work.built_for == net.config:
        return load_network(work.network)
    if hasattr(work.network, "on"):   # a logical view: the same pieces of this network
        return work.network.on(net)
    differ = [f.name for f in fields(net.config) if f.name != "source"
              and getattr(work.built_for, f.name, None) != getattr(net.config, f.name)]
    raise ConfigError(f"workload '{work.name}' was built for a network with other "
                      f"{', '.join(differ) or 'settings'} and re-shapes it (ASTRA-sim's "
                      f"HYBRID_TRANSFORMER splits a dimension): build it for this one (give "
                      f"its source)")


def _compute_model(device: Any, roofline: Any, work, net) -> ComputeModel | None:
    """The compute model of a run: the arguments', else the workload's, else the network's,
    else the workload's fallback."""
    from ..workload.roofline import Roofline, parse_roofline

    if device is not None and roofline is not None:
        raise ConfigError("arguments 'device' and 'roofline': give one or the other")
    if isinstance(device, DeviceModel):
        return device
    if device is not None:
        return DeviceModel(device)
    if roofline is not None:
        if isinstance(roofline, Roofline):
            return roofline
        if isinstance(roofline, Mapping):
            return parse_roofline(roofline, "argument 'roofline'")
        raise config_error("argument", "roofline", "a Roofline or a mapping", roofline)
    wanted = next((c for c in (work.compute, getattr(net.config, "device", None),
                               work.fallback_compute) if c is not None), None)
    if wanted is None or isinstance(wanted, Roofline):
        return wanted
    return DeviceModel(wanted)


def _streams(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise config_error("argument", "collective_streams", "an integer >= 1", value)
    return value


