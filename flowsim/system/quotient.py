"""Symmetric replicas of a training run, simulated once: the flow model on a quotient.

A training job is full of copies: the data-parallel replicas of a pipeline stage, its
tensor- and context-parallel ranks, run the same program on NPUs the network treats alike.
When a permutation of the NPUs maps the network onto itself (links onto links of the same
bandwidth and latency) and every step's messages onto that step's messages, the max-min fair
rates are symmetric too (they are unique, and the permutation of a solution is a solution), so
every flow of an orbit gets one rate and every link of an orbit one load. The flow model then
needs one flow per orbit, on one link per orbit: the *quotient*. A flow's path keeps its links'
representatives, and a link a flow crosses twice (a representative standing for two links of
its path, as on a ring) is loaded twice, which is the load its orbit puts on every such link.

The symmetries used are the cyclic shifts of the logical dimensions a workload runs on, those
that map the network onto itself and every program's NPUs onto themselves (a pipeline stage's
program: its data-, tensor- and context-parallel coordinates; never the pipeline's). Their
group acts freely on the NPUs, so every orbit has ``size`` members and the representatives are
the NPUs whose shifted coordinates are all 0. Each routed step is checked as it is made; one
that some shifts do not map onto itself raises :class:`SymmetryBroken` naming their
dimensions, and the run starts again without them
(:func:`flowsim.system.workload_engine.run_workload`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._arrays import gather_segments
from ..collectives import base_algorithm
from ..topology.network import Network
from ..workload.graph import Workload
from .config import SystemConfig
from .templates import StepTemplate, make_template


class SymmetryBroken(Exception):
    """A step is not mapped onto itself by the shifts of logical dimensions ``dims``
    (``None``: the run needs every flow, e.g. a per-NPU DAG or a rank's own program)."""

    def __init__(self, dims: frozenset[int] | None) -> None:
        super().__init__(f"the shifts of logical dimensions {sorted(dims)} do not map a step "
                         "onto itself" if dims is not None else "the run needs every flow")
        self.dims = dims


@dataclass(frozen=True, eq=False)
class Quotient:
    """The orbits of a group of shifts of logical dimensions.

    Attributes
    ----------
    dims : tuple of int
        The logical dimensions whose cyclic shifts generate the group.
    size : int
        NPUs (and flows, and links) per orbit: the product of those dimensions' sizes.
    representative : ndarray of bool, shape (npus,)
        NPUs standing for their orbit (every shifted coordinate 0).
    link_rep : ndarray of int32, shape (links,)
        Every link's orbit representative (a link of a representative NPU).
    npu_shift, link_shift : list of ndarray
        Per generator: the image of every NPU and of every link under the shift by one.
    network : Network or LogicalView
        The network the orbits are of (reduced steps are routed on it).
    """

    network: object
    dims: tuple[int, ...]
    size: int
    representative: np.ndarray
    link_rep: np.ndarray
    npu_shift: list[np.ndarray]
    link_shift: list[np.ndarray]

    def reduce(self, template: StepTemplate) -> StepTemplate:
        """The template's flows of representative senders, on representative links; raises
        :class:`SymmetryBroken` if a generator does not map the step onto itself."""
        if template.multiplicity is not None or not template.single_path or \
                template.dep_indptr is not None:
            raise SymmetryBroken(None)
        pairs = template.src.astype(np.int64) * self.representative.size + template.dst
        order = np.argsort(pairs, kind="stable")
        ordered = pairs[order]
        if np.any(ordered[1:] == ordered[:-1]):
            raise SymmetryBroken(None)   # two messages between one pair: whose image is which
        broken = frozenset(dim for dim, npu_map, link_map in
                           zip(self.dims, self.npu_shift, self.link_shift)
                           if not _maps_onto_itself(template, order, ordered, npu_map,
                                                    link_map))
        if broken:
            raise SymmetryBroken(broken)   # every shift that fails, dropped at once
        keep = self.representative[template.src]
        lengths = np.diff(template.indptr)[keep]
        entries = gather_segments(template.indptr[:-1][keep], lengths)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(template.indptr.dtype)
        links = self.link_rep[template.links[entries]].astype(template.links.dtype)
        reduced = make_template(self.network, template.src[keep],
                                template.dst[keep], indptr, links)
        reduced.copies = template.copies * self.size
        return reduced

    def expand_links(self, per_link: np.ndarray) -> np.ndarray:
        """Per-link values known on representative links, for every link of their orbits."""
        return np.asarray(per_link)[self.link_rep]


def _maps_onto_itself(template: StepTemplate, order: np.ndarray, ordered: np.ndarray,
                      npu_map: np.ndarray, link_map: np.ndarray) -> bool:
    """Whether shifting every message (its ends by ``npu_map``, its path by ``link_map``)
    gives the step's messages again, path for path; ``ordered`` holds the messages' distinct
    ``src * npus + dst`` sorted, ``order`` the messages in that order."""
    src, dst = template.src, template.dst
    image = npu_map[src].astype(np.int64) * npu_map.size + npu_map[dst]
    where = np.searchsorted(ordered, image)
    where[where >= ordered.size] = 0
    if not np.array_equal(ordered[where], image):
        return False
    target = order[where]
    indptr = template.indptr
    lengths = np.diff(indptr)
    if not np.array_equal(lengths[target], lengths):
        return False
    mine = link_map[template.links]
    theirs = template.links[gather_segments(indptr[:-1][target], lengths)]
    return bool(np.array_equal(mine, theirs))


def find_quotient(network, workload: Workload, speed: np.ndarray,
                  exclude: frozenset[int] = frozenset()) -> Quotient | None:
    """The group generated by every shift of a logical dimension (none of ``exclude``) under
    which ``network`` and ``workload`` are symmetric, or ``None`` when there is none.

    A shift qualifies when it maps every link onto a link of the same bandwidth and latency
    (on a multi-dimensional network, not a routed fabric), every program's NPUs onto
    themselves, and the compute speeds onto themselves; programs that name single peers
    (``peer``) rule every shift out."""
    base = getattr(network, "base", network)
    if not isinstance(base, Network) or network.npus < 2:
        return None
    if any(op.peer is not None for p in workload.programs for op in p.ops):
        return None
    dims = tuple(int(d) for d in network.dims)
    npus = np.arange(network.npus, dtype=np.int64)
    links = _LinkKeys(base)
    chosen, npu_shift, link_shift = [], [], []
    stride = 1
    for d, size in enumerate(dims):
        if size > 1 and d not in exclude:
            coord = (npus // stride) % size
            image = npus + (((coord + 1) % size) - coord) * stride
            link_image = links.image(image)
            if link_image is not None and _programs_kept(workload, image) and \
                    np.array_equal(speed[image], speed):
                chosen.append(d)
                npu_shift.append(image)
                link_shift.append(link_image)
        stride *= size
    if not chosen:
        return None
    strides = np.cumprod((1, *dims[:-1]))
    representative = np.ones(network.npus, bool)
    for d in chosen:
        representative &= (npus // strides[d]) % dims[d] == 0
    return Quotient(network=network, dims=tuple(chosen),
                    size=math.prod(dims[d] for d in chosen), representative=representative,
                    link_rep=_link_representatives(links, npus, strides, dims, chosen),
                    npu_shift=npu_shift, link_shift=link_shift)


def symmetric_system(system: SystemConfig) -> bool:
    """Whether a system's collectives can run on a quotient: barrier steps (no per-NPU DAG,
    which needs every flow: per-NPU synchronisation, or trees without a phase barrier) and no
    custom algorithm (a rank's own program)."""
    if system.synchronization != "barrier" or system.custom:
        return False
    return system.phase_barrier or not any(
        base_algorithm(name).per_npu_only
        for _, names in system.implementations for name in names)


def _programs_kept(workload: Workload, image: np.ndarray) -> bool:
    for program in workload.programs:
        own = np.sort(np.asarray(program.npus, np.int64))
        if not np.array_equal(np.sort(image[own]), own):
            return False
    return True


class _LinkKeys:
    """Links by their ends: an NPU-to-NPU link by its two NPUs, an NPU's link to or from a
    switch by the NPU, the dimension and the direction (each NPU has one of each per switch
    dimension). A switch is identified through its NPUs, so a shift maps a switch's links onto
    one switch's links or is not a symmetry (checked)."""

    def __init__(self, base: Network) -> None:
        n = base.npus
        src, dst = base.link_src, base.link_dst
        self.npus = n
        self.ndims = base.ndims
        self.to_switch = dst >= n
        self.from_switch = src >= n
        self.npu_end = np.where(self.from_switch, dst, src)
        self.other_end = np.where(self.from_switch | self.to_switch, -1, dst)
        self.switch = np.where(self.to_switch, dst, np.where(self.from_switch, src, -1))
        self.dim = base.link_dim
        self.bandwidth, self.latency = base.link_bandwidth, base.link_latency
        self.keys = self._keys(self.npu_end, self.other_end)
        self.order = np.argsort(self.keys, kind="stable")
        ordered = self.keys[self.order]
        self.unique = not (ordered.size > 1 and np.any(ordered[1:] == ordered[:-1]))
        self.ordered = ordered

    def _keys(self, npu_end: np.ndarray, other_end: np.ndarray) -> np.ndarray:
        n, nd = self.npus, self.ndims
        direction = self.from_switch.astype(np.int64)
        switched = (npu_end * nd + self.dim) * 2 + direction + n * n
        return np.where(other_end >= 0, npu_end * n + other_end, switched)

    def image(self, npu_image: np.ndarray) -> np.ndarray | None:
        """Every link's image under the NPU permutation ``npu_image``, or ``None`` when that
        permutation does not map the network onto itself."""
        if not self.unique:
            return None
        other = np.where(self.other_end >= 0, npu_image[np.maximum(self.other_end, 0)], -1)
        keys = self._keys(npu_image[self.npu_end], other)
        where = np.searchsorted(self.ordered, keys)
        where[where >= self.ordered.size] = 0
        if not np.array_equal(self.ordered[where], keys):
            return None
        image = self.order[where]
        if not (np.array_equal(self.bandwidth[image], self.bandwidth) and
                np.array_equal(self.latency[image], self.latency)):
            return None
        switched = self.switch >= 0
        if switched.any():   # each switch's links land on one switch
            sw, target = self.switch[switched], self.switch[image[switched]]
            first = np.full(int(sw.max()) + 1, -1, np.int64)
            first[sw] = target
            if not np.array_equal(first[sw], target):
                return None
        return image.astype(np.int64)


def _link_representatives(links: _LinkKeys, npus: np.ndarray,
                          strides: np.ndarray, dims: tuple[int, ...],
                          chosen: list[int]) -> np.ndarray:
    """Every link's representative: its image under the group element that takes its NPU end
    (an NPU-to-NPU link's sender) to the representative NPU (the group acts freely, so that
    is the orbit's one link there)."""
    back = npus.copy()
    for d in chosen:
        coord = (npus // strides[d]) % dims[d]
        back -= coord * strides[d]
    far = _shift_back(links.other_end, links.npu_end, strides, dims, chosen)
    keys = links._keys(back[links.npu_end], far)
    where = np.searchsorted(links.ordered, keys)
    return links.order[where].astype(np.int32)


def _shift_back(far: np.ndarray, near: np.ndarray, strides: np.ndarray,
                dims: tuple[int, ...], chosen: list[int]) -> np.ndarray:
    """The far ends of links moved by the shift that takes their near ends to the
    representative (each chosen coordinate of the far end minus the near end's, modulo)."""
    out = np.where(far >= 0, far, 0).astype(np.int64)
    for d in chosen:
        near_c = (near // strides[d]) % dims[d]
        far_c = (out // strides[d]) % dims[d]
        out = out + (((far_c - near_c) % dims[d]) - far_c) * strides[d]
    return np.where(far >= 0, out, -1)
