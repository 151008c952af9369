"""From one collective to chunks and phases: ASTRA-sim's multi-dimensional composition.

A collective of ``size`` bytes is cut into ``preferred-dataset-splits`` chunks (integers that
add up to ``size`` exactly: the first ``size % splits`` chunks carry one byte more). Each chunk
walks through a list of :class:`Phase`, one per dimension it crosses:

* all-reduce, ``localBWAware``: reduce-scatter on dims ``0..D-2`` (the data shrinking by each
  dimension's size), all-reduce on the last, all-gather on ``D-2..0`` (anticlockwise rings);
* all-reduce, ``baseline``: a full all-reduce on every dimension in turn;
* reduce-scatter: ascending dims, shrinking; all-gather: descending dims, growing (the size is
  the per-NPU input, as in ASTRA-sim's Chakra ``comm_size``);
* all-to-all: one all-to-all per dimension, each on the whole chunk;
* broadcast / reduce: one phase per dimension from / towards the root;
* a flat ``one*`` algorithm: a single phase over all involved dimensions as one group.

With ``ring-delays: flat`` (NCCL's rings), the steps of a ring reduce-scatter or all-gather
over several dimensions pay one endpoint delay per pass of one flat ring through their
dimension: ``p - 1`` delays in all, as NCCL's ring through all ``p`` ranks.

Dimensions of size 1 (or not involved) are skipped.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from ..collectives import FLAT_PREFIX, base_algorithm
from ..errors import ConfigError, FlowsimWarning
from ..topology.load import AnyNetwork
from ..topology.view import LogicalView
from .config import IMPLEMENTATION_KEYS, SystemConfig


class NpuSet(tuple):
    """NPU ids as a tuple that hashes its items once.

    A program's scope (its 1,024 NPUs, say) keys the dimension queues and the phase, group
    and template caches at every collective it issues; a plain tuple would hash every item
    each time. Equal to, and hashing like, the plain tuple of the same ids.
    """

    def __hash__(self) -> int:
        cached = self.__dict__.get("hash")
        if cached is None:
            cached = self.__dict__["hash"] = tuple.__hash__(self)
        return cached


@dataclass(frozen=True)
class Phase:
    """One collective on every group of one dimension (or of several, for flat algorithms).

    Attributes
    ----------
    dims : tuple of int
        Dimensions the groups span (one, unless flat).
    algorithm : str
        Per-dimension algorithm name (``ring``, ``direct``, ...).
    collective : str
        Collective type run in this phase.
    data : float
        ``D``: bytes of the buffer the phase works on (see :mod:`flowsim.collectives.base`).
    direction : int
        +1 clockwise rings, -1 anticlockwise.
    in_network : bool
        All-reduce reduced by the dimension's switch.
    root : int
        Root NPU (global id); used by broadcast and reduce.
    variant : int
        Shape variant of the algorithm (which of the two trees of a double binary tree).
    flat : bool
        The phase comes from a ``one*`` algorithm or an explicit group (ASTRA-sim charges
        such messages only for the lowest dimension they cross).
    members : tuple of int
        NPUs of an explicit group, in rank order (empty: the groups of ``dims``).
    scope : tuple of int
        With ``dims``: only the groups made of these NPUs take part (empty: every group).
    delay_passes : int
        Endpoint delays each step pays after it: 1, or with ``ring-delays: flat`` the passes
        of the flat ring through this dimension (:data:`~.config.RING_DELAYS`).
    """

    dims: tuple[int, ...]
    algorithm: str
    collective: str
    data: float
    direction: int = 1
    in_network: bool = False
    root: int = 0
    flat: bool = False
    variant: int = 0
    members: tuple[int, ...] = ()
    scope: tuple[int, ...] = ()
    delay_passes: int = 1

    @property
    def queue(self) -> tuple[int, tuple[int, ...]]:
        """The dimension queue this phase waits in.

        Every NPU has its own queue per dimension (ASTRA-sim's per-NPU scheduler); phases on
        the same NPUs share one: ``(first dimension, the NPUs)``, the NPUs being an explicit
        group's members (dimension -1), or the scope of a program that runs on part of the
        network (empty: every NPU). Phases of different programs (pipeline stages, ranks of a
        trace) therefore never wait for each other in a queue.
        """
        if self.members:
            return (-1, self.members)
        return (self.dims[0], self.scope)


def chunk_sizes(size: int, splits: int) -> list[int]:
    """Integer chunk sizes adding up to ``size`` exactly (the first ``size % splits`` get +1)."""
    splits = max(1, min(splits, size)) if size > 0 else 1
    base, extra = divmod(size, splits)
    return [base + (1 if i < extra else 0) for i in range(splits)]


#: ASTRA-sim runs a tree all-reduce of the whole chunk for every collective type configured
#: with doubleBinaryTree (Sys.cc); flowsim does the same, with a warning.
TREE = "doubleBinaryTree"


def _check_algorithm(network: AnyNetwork, system: SystemConfig, collective: str, name: str,
                     dims: tuple[int, ...], key: str) -> None:
    algorithm = base_algorithm(name)
    if algorithm.name == TREE and collective in ("reduce_scatter", "all_gather", "all_to_all"):
        warnings.warn(f"{system.source}: key '{key}': doubleBinaryTree implements all-reduce "
                      f"only; as in ASTRA-sim, the {collective.replace('_', '-')} runs as a "
                      f"full-size tree all-reduce", FlowsimWarning, stacklevel=4)
        collective = "all_reduce"
    if collective not in algorithm.supports:
        raise ConfigError(f"{system.source}: key '{key}': {name} does not implement "
                          f"{collective.replace('_', '-')}; choose ring or direct")
    if algorithm.check_size is not None:
        p = math.prod(network.dims[d] for d in dims)
        try:
            algorithm.check_size(p)
        except ValueError as exc:
            raise ConfigError(f"{system.source}: key '{key}': {exc}") from None


def algorithm_names(network: AnyNetwork, system: SystemConfig, collective: str
                    ) -> tuple[str, ...]:
    """The system's algorithms for a collective type, one per dimension of ``network`` (``ring``
    everywhere by default); on a logical view, a list with one algorithm per network dimension
    serves all the pieces of that dimension (as ASTRA-sim 1.0 does for a split dimension)."""
    names = system.implementation(collective) or ("ring",) * network.ndims
    if collective in system.every_dimension:
        return tuple(names) * network.ndims
    if isinstance(network, LogicalView) and len(names) == network.base.ndims != network.ndims:
        names = tuple(names[p] for p in network.parents)
    return tuple(names)


def collective_phases(network: AnyNetwork, system: SystemConfig, collective: str,
                      chunk: float, *, dims: tuple[int, ...] | None = None,
                      root: int = 0, group: tuple[int, ...] = (),
                      scope: tuple[int, ...] = ()) -> list[Phase]:
    """The phases of one chunk of ``chunk`` bytes of ``collective``.

    Parameters
    ----------
    dims : tuple of int, optional
        Dimensions the collective spans (default: all). Size-1 dimensions are dropped.
    root : int
        Root NPU of a broadcast or reduce.
    group : tuple of int
        An explicit communicator (NPU ids in rank order): one flat phase over these NPUs with
        the first listed algorithm, like a ``one*`` algorithm.
    scope : tuple of int
        Only the groups of ``dims`` made of these NPUs take part (a program of a workload
        that runs on part of the network); empty: every group.
    """
    key = IMPLEMENTATION_KEYS[collective]
    if group:
        return _group_phases(system, collective, chunk, root, group, network.ndims, key)
    involved = tuple(d for d in (range(network.ndims) if dims is None else dims)
                     if network.dims[d] > 1)
    if not involved:
        return []
    names = algorithm_names(network, system, collective)
    if len(names) == 1 and network.ndims > 1 and not names[0].startswith(FLAT_PREFIX):
        if collective in ("broadcast", "reduce") and \
                names == system.implementation("all_reduce"):
            key = IMPLEMENTATION_KEYS["all_reduce"]   # their default: name the key read
        warnings.warn(f"{system.source}: key '{key}': one algorithm for {network.ndims} "
                      f"dimensions; using '{names[0]}' in every dimension (ASTRA-sim would "
                      f"run the collective on dimension 0 only)", FlowsimWarning, stacklevel=3)
        names = names * network.ndims
    if len(names) == 1 and names[0].startswith(FLAT_PREFIX):
        _check_algorithm(network, system, collective, names[0], involved, key)
        total = math.prod(network.dims[d] for d in involved)
        data = chunk * total if collective == "all_gather" else chunk
        return [Phase(involved, base_algorithm(names[0]).name, collective, data, root=root,
                      flat=True, scope=scope)]
    if len(names) != network.ndims:
        raise ConfigError(f"{system.source}: key '{key}': expected {network.ndims} algorithm "
                          f"names (one per network dimension), found {len(names)}: "
                          f"{list(names)}")
    for d in involved:
        _check_algorithm(network, system, collective, names[d], (d,), f"{key}[{d}]")
    return _dimension_phases(network, system, collective, chunk, involved, names, root, scope)


def _group_phases(system: SystemConfig, collective: str, chunk: float, root: int,
                  group: tuple[int, ...], ndims: int, key: str) -> list[Phase]:
    """An explicit communicator: one flat phase over its NPUs with the first algorithm."""
    name = base_algorithm((system.implementation(collective) or ("ring",))[0]).name
    algorithm = base_algorithm(name)
    if collective not in algorithm.supports:
        raise ConfigError(f"{system.source}: key '{key}': {name} does not implement "
                          f"{collective.replace('_', '-')}; choose ring or direct")
    if algorithm.check_size is not None:
        try:
            algorithm.check_size(len(group))
        except ValueError as exc:
            raise ConfigError(f"argument 'group': {exc}") from None
    data = chunk * len(group) if collective == "all_gather" else chunk
    return [Phase(tuple(range(ndims)), name, collective, data, root=root, flat=True,
                  members=tuple(group))]


def _dimension_phases(network: AnyNetwork, system: SystemConfig, collective: str, chunk: float,
                      involved: tuple[int, ...], names: tuple[str, ...], root: int,
                      scope: tuple[int, ...]) -> list[Phase]:
    """One phase per involved dimension, composed as the module docstring says."""
    inr = network.config.in_network_reduction
    tree = {d: names[d] == TREE for d in involved}
    passes = dict.fromkeys(involved, 1)
    if system.ring_delays == "flat" and collective in ("reduce_scatter", "all_gather") and \
            all(names[d] == "ring" for d in involved):
        # one ring through every rank, inner dimensions fastest: it passes through a
        # dimension once per combination of the dimensions outside it
        passes = {d: math.prod(network.dims[e] for e in involved if e > d) for d in involved}

    def phase(d: int, coll: str, data: float, direction: int = 1) -> Phase:
        if tree[d] and coll in ("reduce_scatter", "all_gather", "all_to_all"):
            coll = "all_reduce"  # ASTRA-sim's tree all-reduce of the whole chunk
        reducing = inr[d] and coll == "all_reduce"
        return Phase((d,), names[d], coll, data, direction, reducing, root, scope=scope,
                     delay_passes=passes[d])

    def shrink(d: int) -> int:
        """How much the data shrinks (reduce-scatter) or grows (all-gather) on dim d."""
        return 1 if tree[d] else network.dims[d]

    out: list[Phase] = []
    if collective == "all_reduce" and system.collective_optimization == "localBWAware":
        data = chunk
        for d in involved[:-1]:
            out.append(phase(d, "reduce_scatter", data))
            data /= shrink(d)
        out.append(phase(involved[-1], "all_reduce", data))
        for d in reversed(involved[:-1]):
            data *= shrink(d)
            out.append(phase(d, "all_gather", data, -1))
    elif collective in ("all_reduce", "all_to_all", "broadcast", "reduce"):
        out = [phase(d, collective, chunk) for d in involved]
    elif collective == "reduce_scatter":
        data = chunk
        for d in involved:
            out.append(phase(d, collective, data))
            data /= shrink(d)
    elif collective == "all_gather":
        data = chunk
        for d in reversed(involved):
            data *= shrink(d)
            out.append(phase(d, collective, data))
    else:
        raise ConfigError(f"argument 'collective': {collective} has no phases")
    return out


def collective_chunks(network: AnyNetwork, system: SystemConfig, op, scope: tuple[int, ...],
                      cache: dict[tuple, list[list[Phase]]]) -> list[list[Phase]]:
    """The phases of every chunk of collective op ``op`` (``collective``, ``size``, ``dims``,
    ``group``) issued by the NPUs ``scope``; phases are immutable, so collectives of one shape
    share them through ``cache``."""
    key = (op.collective, op.size, op.dims, op.group, scope)
    chunks = cache.get(key)
    if chunks is None:
        chunks = cache[key] = assign_variants([collective_phases(
            network, system, op.collective, c, dims=op.dims, group=op.group, scope=scope)
            for c in chunk_sizes(op.size, system.splits)])
    return chunks


def assign_variants(chunks: list[list[Phase]]) -> list[list[Phase]]:
    """Number the phases of each dimension in chunk order, as ASTRA-sim creates them, so that
    successive uses of a double binary tree alternate between its two trees."""
    from dataclasses import replace

    counters: dict[tuple[int, ...], int] = {}
    out = []
    for phases in chunks:
        numbered = []
        for ph in phases:
            n = counters.get(ph.dims, 0)
            counters[ph.dims] = n + 1
            numbered.append(replace(ph, variant=n % 2))
        out.append(numbered)
    return out
