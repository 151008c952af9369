"""Routed steps: the messages of one algorithm step on every group of a phase, as arrays.

A :class:`StepTemplate` is built once per (phase shape, step shape) and reused by every chunk
and every collective of that shape; both timers consume it (the analytical one prices it with
:mod:`.cost`, the flow one hands its flows to the engine).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .._arrays import gather_segments, sparse_link_sums
from ..network.messages import message_loads
from . import cost


@dataclass(eq=False)
class StepTemplate:
    """Routed messages of one step on every group of a phase (reused across chunks).

    Each message travels as one flow, or, on a fabric with ECMP, as several flows that split
    it over equal-cost paths; arrays are per flow.

    Attributes
    ----------
    src, dst, indptr, links : the flows and their paths (CSR).
    weight : fraction of its message's bytes each flow carries (1 on a single path).
    latency : the latency of each flow's message (the longest of its paths), ns.
    per_byte : ns per byte of each flow's message when it is alone on the network (its own
        max-min share: 1 / bottleneck on a single path).
    link_bytes_per_byte : (link ids, bytes carried per byte of message) over the step.
    link_busy_per_byte : (link ids, ns of transmission per byte of message) over the step.
    dep_indptr, dep_local : ``per_npu`` only: for every flow, the flows of the previous step
        into its sender, as indices into that step's arrays.
    copies : groups this template stands for (more than 1 when one group is simulated for all).
    multiplicity : copies each flow stands for (flows over twin links merged, see
        ``FabricNetwork.merges_twins``), or ``None``: one each. ``weight`` is per copy.
    """

    src: np.ndarray
    dst: np.ndarray
    indptr: np.ndarray
    links: np.ndarray
    weight: np.ndarray
    latency: np.ndarray
    per_byte: np.ndarray
    link_bytes_per_byte: tuple[np.ndarray, np.ndarray]
    link_busy_per_byte: tuple[np.ndarray, np.ndarray]
    dep_indptr: np.ndarray | None = None
    dep_local: np.ndarray | None = None
    copies: int = 1
    multiplicity: np.ndarray | None = None
    _durations: dict[float, float] = field(default_factory=dict, repr=False)
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def flows(self) -> int:
        """Flows of the simulated groups."""
        return int(self.src.size)

    @property
    def represented_flows(self) -> int:
        """Flows of every group this template stands for, each merged flow's copies
        counted."""
        flows = self.src.size if self.multiplicity is None else round(self.multiplicity.sum())
        return int(flows) * self.copies

    @property
    def single_path(self) -> bool:
        single = self._cache.get("single_path")
        if single is None:
            single = self._cache["single_path"] = bool(np.all(self.weight == 1.0))
        return bool(single)

    def engine_paths(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Per-flow path latency and bottleneck for the flow engine (computed once). Flows of
        multi-path messages get their own path's latency, kept when the template was made
        (the template's ``latency`` and ``per_byte`` are per message), and a bottleneck only
        when merged: one link's bandwidth, not the group's engine capacity (otherwise
        ``None``: the engine takes it from the links)."""
        cached = self._cache.get("paths")
        if cached is None:
            if self.single_path:
                with np.errstate(divide="ignore"):
                    bottleneck = np.where(self.per_byte > 0, 1.0 / self.per_byte, np.inf)
                cached = (self.latency, bottleneck)
            else:
                cached = (None, None)
            self._cache["paths"] = cached
        return cached  # type: ignore[return-value]

    def duration(self, nbytes: float) -> float:
        """The step's length when every message runs alone (:func:`.cost.step_ns`), cached per
        message size."""
        d = self._durations.get(nbytes)
        if d is None:
            d = self._durations[nbytes] = cost.step_ns(self.latency, self.per_byte, nbytes)
        return d

    def arrivals(self, nbytes: float) -> np.ndarray:
        """Arrival of each flow's message, after its start, when it runs alone (ns)."""
        return cost.message_ns(self.latency, self.per_byte, nbytes)

    def flow_bytes(self, nbytes: float) -> np.ndarray | float:
        """Bytes of each flow for messages of ``nbytes``."""
        return nbytes if self.single_path else nbytes * self.weight

    def dim_bytes_per_byte(self, link_dim: np.ndarray, ndims: int) -> np.ndarray:
        """Bytes the step puts on each logical dimension per byte of message, every group it
        stands for counted (cached; fabric links, of no dimension, are left out)."""
        per_dim = self._cache.get("dim_bytes")
        if per_dim is None:
            ids, per_byte = self.link_bytes_per_byte
            dims = link_dim[ids]
            known = dims >= 0
            per_dim = np.bincount(dims[known], weights=per_byte[known],
                                  minlength=ndims) * self.copies
            self._cache["dim_bytes"] = per_dim
        return per_dim  # type: ignore[return-value]

    def dims_between(self, network) -> tuple[int, ...]:
        """Logical dimensions in which the messages' ends differ: those a point-to-point
        message occupies (the dimensions whose links it crosses on a multi-dimensional
        network; also defined where links belong to no dimension: fabrics, cut dimensions)."""
        dims = self._cache.get("between")
        if dims is None:
            differ = np.any(network.coords(self.src) != network.coords(self.dst), axis=0)
            dims = self._cache["between"] = tuple(int(d) for d in np.flatnonzero(differ))
        return dims  # type: ignore[return-value]


def flow_counts(templates: Iterable[StepTemplate]) -> tuple[int, int]:
    """Flows of some templates: those timed, and those they stand for (their
    :attr:`~StepTemplate.flows` and :attr:`~StepTemplate.represented_flows` summed)."""
    timed = represented = 0
    for template in templates:
        timed += template.flows
        represented += template.represented_flows
    return timed, represented


def make_template(network, src: np.ndarray, dst: np.ndarray, indptr: np.ndarray,
                  links: np.ndarray, message: np.ndarray | None = None,
                  weight: np.ndarray | None = None,
                  multiplicity: np.ndarray | None = None) -> StepTemplate:
    """Bundle a routed step with the per-message numbers both timers need.

    ``message[f]`` is the message flow ``f`` belongs to and ``weight[f]`` its share of the
    bytes (default: one flow per message; flows sorted by message); ``multiplicity[f]`` the
    copies it stands for, on links whose engine capacity is their twin group's.
    """
    n = src.size
    lengths = np.diff(indptr)
    path_latency = network.path_latency(indptr, links)
    L = network.num_links
    if message is None:
        weight = np.ones(n)
        per_byte = cost.ns_per_byte(network.path_bottleneck(indptr, links))
        ids, counts, busy = sparse_link_sums(links, np.repeat(per_byte, lengths), L)
        return StepTemplate(src, dst, indptr, links, weight, path_latency, per_byte,
                            (ids, counts.astype(float)), (ids[busy > 0], busy[busy > 0]))
    if weight is None:
        raise ValueError("make_template: flows of messages need their weights")
    n_messages = int(message.max()) + 1 if n else 0
    if np.any(message[1:] < message[:-1]):
        raise ValueError("make_template: flows must be sorted by message")
    # a merged flow loads its representative links as all its copies, against the twin
    # group's capacity there: the share of one link of the group
    load = weight if multiplicity is None else weight * multiplicity
    capacity = network.link_bandwidth if multiplicity is None else network.engine_capacity
    latency, message_per_byte, busy = message_loads(
        np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(links, np.int64),
        np.ascontiguousarray(load, np.float64), np.ascontiguousarray(message, np.int64),
        np.ascontiguousarray(path_latency, np.float64),
        np.ascontiguousarray(capacity, np.float64), n_messages)
    carried = np.bincount(links, weights=np.repeat(load, lengths), minlength=L)
    template = StepTemplate(src, dst, indptr, links, weight, latency[message],
                            message_per_byte[message],
                            (np.nonzero(carried)[0], carried[carried > 0]),
                            (np.nonzero(busy)[0], busy[busy > 0]), multiplicity=multiplicity)
    if not template.single_path:   # the engine would sum the same latencies again; a merged
        # flow's bottleneck is one link's, not its group's engine capacity
        template._cache["paths"] = (path_latency, None if multiplicity is None else
                                    network.path_bottleneck(indptr, links))
    return template


def route_messages(network, src: np.ndarray, dst: np.ndarray, *,
                   lowest_dim_only: bool = False) -> StepTemplate:
    """A template of messages ``src[i] -> dst[i]`` routed on ``network`` (ECMP-split where the
    network sprays)."""
    multiplicity = None
    if network.merges_twins:
        message, weight, multiplicity, indptr, links = network.routes_merged(
            src, dst, lowest_dim_only=lowest_dim_only)
        if np.all(multiplicity == 1.0):
            multiplicity = None
    else:
        message, weight, indptr, links = network.routes_multipath(
            src, dst, lowest_dim_only=lowest_dim_only)
    if multiplicity is None and np.array_equal(message, np.arange(src.size)):
        return make_template(network, src, dst, indptr, links)
    return make_template(network, src[message], dst[message], indptr, links,
                         message=message, weight=weight, multiplicity=multiplicity)


def incoming(previous_dst: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR: for each entry of ``src``, the indices of ``previous_dst`` equal to it."""
    order = np.argsort(previous_dst, kind="stable")
    lo = np.searchsorted(previous_dst[order], src, side="left")
    hi = np.searchsorted(previous_dst[order], src, side="right")
    counts = hi - lo
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, order[gather_segments(lo, counts)].astype(np.int64)
