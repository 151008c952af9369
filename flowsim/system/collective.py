"""One collective, end to end: :func:`run_collective` (a record of plain arrays) and
:func:`simulate_collective` (the same as an xarray Dataset).

Importing this module loads no xarray: a one-process-per-point loop that prints a summary
(``flowsim collective --json``) never needs it."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from .._gc_pause import gc_paused
from .._validate import as_bool, as_int
from ..collectives import COLLECTIVES, canonical_collective
from ..errors import ConfigError, ConfigTypeError, FlowsimWarning, config_error, public_api
from ..network.models import check_model
from ..results.collective import CollectiveRecord
from ..topology import NetworkConfig, load_network
from ..topology.load import AnyNetwork
from ..units import parse_size
from .budget import check_max_work, check_work, collective_work
from .config import SystemConfig
from .load import system_for
from .phases import algorithm_names, assign_variants, chunk_sizes, collective_phases
from .scheduler import Schedule, can_replicate
from .templates import route_messages

if TYPE_CHECKING:
    import xarray as xr

NetworkLike: TypeAlias = "str | os.PathLike | Mapping[str, Any] | NetworkConfig | AnyNetwork"


def _check_dims(network: AnyNetwork, dims: Any) -> tuple[int, ...] | None:
    if dims is None:
        return None
    expected = f"a list of distinct dimension indices in 0..{network.ndims - 1}"
    if isinstance(dims, (str, bytes)) or not isinstance(dims, (list, tuple, range, np.ndarray)):
        raise config_error("argument", "dims", expected, dims, cls=ConfigTypeError)
    # each index an integer ("0" and 0.5 are not dimension 0)
    out = tuple(as_int(d, source="argument", key="dims", minimum=0,
                       maximum=network.ndims - 1)
                for d in (dims.ravel().tolist() if isinstance(dims, np.ndarray) else dims))
    if not out or len(set(out)) != len(out):
        raise config_error("argument", "dims", expected, dims)
    return tuple(sorted(out))


def _check_group(network: AnyNetwork, group: Any) -> tuple[int, ...]:
    if group is None:
        return ()
    try:
        members = [int(m) for m in group]
    except (TypeError, ValueError):
        raise config_error("argument", "group", "a list of NPU ids", group) from None
    if len(members) < 2 or len(set(members)) != len(members):
        raise config_error("argument", "group", "at least 2 distinct NPU ids", group)
    for m in members:
        if not 0 <= m < network.npus:
            raise config_error("argument", "group",
                               f"NPU ids in 0..{network.npus - 1} (NPU {m} does not exist)",
                               group)
    return tuple(members)


def _check_npu(network: AnyNetwork, value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
            not 0 <= int(value) < network.npus:
        raise config_error("argument", key, f"an NPU id in 0..{network.npus - 1}", value)
    return int(value)


@dataclass(frozen=True)
class _Request:
    """A validated collective request."""

    collective: str
    size: int
    dims: tuple[int, ...] | None
    group: tuple[int, ...]
    root: int
    src: int
    dst: int


def _request(net: AnyNetwork, collective: Any, size: Any, *, dims: Any, group: Any, root: Any,
             src: Any, dst: Any) -> _Request:
    """Check the arguments of :func:`simulate_collective` against the network."""
    name = canonical_collective(collective)
    if name is None:
        raise config_error("argument", "collective",
                           "one of " + ", ".join(c.replace("_", "-") for c in COLLECTIVES),
                           collective)
    nbytes = parse_size(size, source="argument", key="size")
    dims_t = _check_dims(net, dims)
    members = _check_group(net, group)
    root = _check_npu(net, root, "root")
    if members and dims_t is not None:
        raise ConfigError("arguments 'group' and 'dims': give one or the other")
    if members and name in ("broadcast", "reduce") and root not in members:
        raise config_error("argument", "root", f"an NPU of the group {list(members)}", root)
    if name != "send_recv":
        return _Request(name, nbytes, dims_t, members, root, -1, -1)
    if src is None or dst is None:
        raise ConfigError("argument 'src'/'dst': a send_recv needs both endpoints")
    src, dst = _check_npu(net, src, "src"), _check_npu(net, dst, "dst")
    if src == dst:
        raise config_error("argument", "dst", "an NPU other than src", dst)
    return _Request(name, nbytes, dims_t, members, root, src, dst)


@public_api
def simulate_collective(network: NetworkLike, collective: str, size: int | str,
                        system: str | os.PathLike | Mapping[str, Any] | SystemConfig | None = None,
                        model: str = "analytical", *, dims: Any = None, root: int = 0,
                        src: int | None = None, dst: int | None = None,
                        trace: str | os.PathLike | None = None,
                        symmetry: bool = True, group: Any = None,
                        replay: bool = True, max_work: float | None = None) -> xr.Dataset:
    """Simulate one collective and return its timing as an :class:`xarray.Dataset`.

    Parameters
    ----------
    network : path, bundled name, mapping, NetworkConfig or Network
        The topology (ASTRA-sim 2.x network YAML keys).
    collective : str
        ``"all_reduce"``, ``"reduce_scatter"``, ``"all_gather"``, ``"all_to_all"``,
        ``"broadcast"``, ``"reduce"`` or ``"send_recv"`` (hyphens and CamelCase accepted).
    size : int or str
        Bytes, e.g. ``1 << 20`` or ``"64MiB"``. As in ASTRA-sim, for all-gather this is each
        NPU's input (the output is ``npus * size``); for the others it is each NPU's buffer.
    system : path, bundled name, mapping, SystemConfig or None
        ASTRA-sim 2.x system json keys; ``None``: the network's own (a ``cluster:``
        network's is the bundled ``nccl``), else the defaults of :class:`SystemConfig`.
    model : {"analytical", "flow"}
        Congestion-unaware (ASTRA-sim's analytical backend) or max-min fair flow model.
    dims : sequence of int, optional
        Dimensions the collective spans (default all), like Chakra's ``involved_dim``.
    root : int
        Root NPU of a broadcast or reduce.
    src, dst : int
        Endpoints of a ``send_recv``.
    trace : path, optional
        Write a Chrome-trace / Perfetto timeline of the steps and messages there.
    group : sequence of int, optional
        An explicit communicator (NPU ids in rank order, at least 2) instead of whole
        dimensions; runs one flat phase over it with the first algorithm of the list.
    symmetry : bool
        Simulate one group per dimension when all groups are exact replicas (barrier
        synchronisation, per-dimension phases); ``False`` simulates every group, for checks.
    replay : bool
        Flow model: replay steps and phases whose links carry nothing else from their solution
        alone (exact, and the default); ``False`` puts every flow into the engine, for checks.
    max_work : float, optional
        Work budget (default :data:`~flowsim.system.budget.DEFAULT_MAX_WORK`); a collective
        estimated above it is refused before it runs (see :mod:`flowsim.system.budget`).

    Returns
    -------
    xarray.Dataset
        ``time_ns`` (scalar: when the last chunk finished), ``npu_finish_ns`` (npu),
        ``link_bytes``, ``link_busy_ns``, ``link_utilization`` (link), ``dim_bytes`` and
        ``dim_busy_ns`` (dim), with the topology and algorithm per dimension as coordinates.
    """
    return run_collective(network, collective, size, system, model, dims=dims, root=root,
                          src=src, dst=dst, trace=trace, symmetry=symmetry, group=group,
                          replay=replay, max_work=max_work).to_dataset()


@public_api
@gc_paused()
def run_collective(network: NetworkLike, collective: str, size: int | str,
                   system: str | os.PathLike | Mapping[str, Any] | SystemConfig | None = None,
                   model: str = "analytical", *, dims: Any = None, root: int = 0,
                   src: int | None = None, dst: int | None = None,
                   trace: str | os.PathLike | None = None,
                   symmetry: bool = True, group: Any = None,
                   replay: bool = True, max_work: float | None = None) -> CollectiveRecord:
    """Simulate one collective and return its record: the numbers of
    :func:`simulate_collective` as plain arrays, without building a Dataset (nor importing
    xarray): for a shell loop that runs one process per point, or an optimizer's inner loop.

    Takes the parameters of :func:`simulate_collective`; ``.to_dataset()`` of the record is
    its Dataset.
    """
    budget = check_max_work(max_work)
    symmetry = as_bool(symmetry, source="argument", key="symmetry")
    replay = as_bool(replay, source="argument", key="replay")
    net = load_network(network)
    sys_cfg = system_for(system, net)
    model = check_model(model)
    request = _request(net, collective, size, dims=dims, group=group, root=root, src=src,
                       dst=dst)
    name, nbytes = request.collective, request.size
    custom = dict(sys_cfg.custom).get(name)
    if custom is not None:      # run the custom traces, never the native algorithm instead
        from .custom_collective import run_custom_collective

        schedule = run_custom_collective(net, sys_cfg, model, name, nbytes, dims=request.dims,
                                         group=request.group, prefix=custom,
                                         trace=trace is not None, replay=replay)
        return _record(schedule, net, sys_cfg, name, nbytes, model,
                       (f"custom:{os.path.basename(custom)}",) * net.ndims)
    if name == "send_recv":
        schedule = Schedule(net, sys_cfg, model, trace=trace is not None, replay=replay)
        algorithms = ("p2p",) * net.ndims
        _send_recv(schedule, request.src, request.dst, nbytes)
    else:
        chunks = assign_variants([collective_phases(net, sys_cfg, name, c, dims=request.dims,
                                                    root=request.root, group=request.group)
                                  for c in chunk_sizes(nbytes, sys_cfg.splits)])
        replicate = symmetry and can_replicate(net, sys_cfg, chunks, trace is not None)
        check_work(collective_work(net, chunks, replicate), budget, "collective")
        schedule = Schedule(net, sys_cfg, model, trace=trace is not None, replicate=replicate,
                            replay=replay)
        schedule.issue(chunks, at=0.0)
        algorithms = tuple(_algorithm_names(sys_cfg, name, net))
    schedule.run()
    if trace is not None:
        if not schedule.trace_log:
            warnings.warn("the timeline covers barrier-synchronised steps; this run (per-NPU "
                          "synchronisation, a tree, or a send-recv) has none, so the trace "
                          "file is empty", FlowsimWarning, stacklevel=2)
        _write_trace(schedule, trace)
    return _record(schedule, net, sys_cfg, name, nbytes, model, algorithms)


def _write_trace(schedule: Schedule, path: str | os.PathLike) -> None:
    from ..results.trace import chrome_trace, write_trace

    timer = schedule.timer
    write_trace(chrome_trace(schedule.trace_log or [],
                             lambda entry: timer.message_times(entry["token"])), path)


def _algorithm_names(system: SystemConfig, collective: str, network) -> list[str]:
    names = algorithm_names(network, system, collective)
    return list(names) * network.ndims if len(names) == 1 and network.ndims > 1 \
        else list(names)


def _send_recv(schedule: Schedule, src: int, dst: int, nbytes: int) -> None:
    """A point-to-point message: one flow, one endpoint delay before and after."""
    template = route_messages(schedule.network, np.array([src]), np.array([dst]))
    ed = schedule.system.endpoint_delay_ns
    ledger = schedule.ledger

    def finished(t: float) -> None:
        ledger.npu_finish[[src, dst]] = t
        ledger.collective_end[0] = t

    ledger.collective_end[0] = 0.0
    schedule.message(template, float(nbytes), 0.0, ed,
                     lambda t: schedule.at(t + ed, finished))


def _record(schedule: Schedule, net, system: SystemConfig, collective: str,
            nbytes: int, model: str, algorithms: tuple[str, ...]) -> CollectiveRecord:
    timer = schedule.timer
    ledger = schedule.ledger
    time_ns = max(ledger.collective_end.values(), default=0.0)
    link_bytes = schedule.expand_replicated(np.asarray(timer.link_bytes, np.float64))
    if np.any(net.link_dim < 0):  # a fabric: links belong to no logical dimension
        dim_bytes = np.full(net.ndims, np.nan)
    else:
        dim_bytes = np.bincount(net.link_dim, weights=link_bytes, minlength=net.ndims)
    stats = timer.stats()
    if schedule.replicate or net.merges_twins:
        # every simulated flow stands for one flow in each group of its dimension, or for
        # its copies over twin links
        stats = stats.with_represented_flows(ledger.represented_flows)
    return CollectiveRecord(network=net, system=system, collective=collective, size=nbytes,
                            model=model, algorithms=algorithms, time_ns=time_ns,
                            npu_finish_ns=ledger.npu_finish.copy(), link_bytes=link_bytes,
                            link_busy_ns=schedule.expand_replicated(
                                np.asarray(timer.link_busy, np.float64)),
                            dim_bytes=dim_bytes, dim_busy_ns=ledger.dim_busy_ns(),
                            stats=stats)
