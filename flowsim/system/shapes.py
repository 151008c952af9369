"""The static structure of phases on one network: algorithm steps, groups, routed templates,
per-NPU DAGs and barrier phase plans, each built once per shape and cached.

Nothing here depends on time; the scheduler asks for a phase's structure and hands it to a
timer.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..collectives import base_algorithm
from ..collectives.base import Step
from . import cost
from .config import SystemConfig
from .dag import PhaseDag
from .phase_plan import PhasePlan
from .phases import Phase
from .quotient import Quotient, SymmetryBroken
from .templates import StepTemplate, incoming, make_template, route_messages

#: the collectives whose groups of one dimension are exact replicas (see can_replicate)
REPLICABLE_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def replicable_phase(phase: Phase) -> bool:
    """Whether one group of this phase stands for all of them (see
    :func:`flowsim.system.scheduler.can_replicate`)."""
    return (len(phase.dims) == 1 and not phase.flat and not phase.members and
            phase.collective in REPLICABLE_COLLECTIVES
            and not base_algorithm(phase.algorithm).per_npu_only)


#: how many networks' phase structures :func:`phase_shapes` keeps (a 131,072-GPU network's
#: may hold a few hundred MB of routed templates)
KEPT_SHAPES = 4
_kept: OrderedDict[tuple, tuple[object, PhaseShapes]] = OrderedDict()


def phase_shapes(network, system: SystemConfig, *, lowest_dim_for_flat: bool,
                 replicate: bool, quotient: Quotient | None = None) -> PhaseShapes:
    """The :class:`PhaseShapes` of ``network`` under ``system``, kept for the
    :data:`KEPT_SHAPES` most recently used: nothing in them depends on time, and a loaded
    network is cached by config, so runs on one network (a sweep of workloads, an
    optimizer's loop, a spec run again) build each phase's steps, routes and plan once."""
    key = (id(network), system, lowest_dim_for_flat, replicate,
           None if quotient is None else quotient.dims)
    try:
        kept = _kept.get(key)
    except TypeError:   # a config built by hand with a list in it: not kept
        return PhaseShapes(network, system, replicate=replicate,
                           lowest_dim_for_flat=lowest_dim_for_flat, quotient=quotient)
    if kept is not None and kept[0] is network:   # (the entry keeps its network alive)
        _kept.move_to_end(key)
        return kept[1]
    shapes = PhaseShapes(network, system, replicate=replicate,
                         lowest_dim_for_flat=lowest_dim_for_flat, quotient=quotient)
    _kept[key] = (network, shapes)
    while len(_kept) > KEPT_SHAPES:
        _kept.popitem(last=False)
    return shapes


class PhaseShapes:
    """Builds and caches the structure of phases on ``network``.

    Parameters
    ----------
    network : Network or FabricNetwork
    system : SystemConfig
    lowest_dim_for_flat : bool
        Route messages of flat (``one*``) phases through the lowest dimension they cross only,
        as ASTRA-sim's analytical backend charges them (a property of the network model).
    replicate : bool
        Route only the first group of every replicable phase; its templates stand for all.
    quotient : Quotient, optional
        Keep one message per orbit of these symmetries, on representative links (see
        :mod:`.quotient`; raises :class:`~.quotient.SymmetryBroken` on a step they do not
        map onto itself, and for per-NPU synchronisation, which needs every message).
    """

    def __init__(self, network, system: SystemConfig, *, lowest_dim_for_flat: bool,
                 replicate: bool, quotient: Quotient | None = None) -> None:
        self.network = network
        self.system = system
        self.lowest_dim_for_flat = lowest_dim_for_flat
        self.replicate = replicate
        self.quotient = quotient
        self._steps: dict[tuple, list[Step]] = {}
        self._groups: dict[tuple, np.ndarray] = {}
        self._templates: dict[tuple, list[StepTemplate]] = {}
        self._dags: dict[tuple, PhaseDag] = {}
        # the plan references its templates, so their ids in the key stay unique
        self._plans: dict[tuple[int, float, int], PhasePlan] = {}
        self._messages: dict[tuple[bytes, bytes], StepTemplate] = {}

    # ------------------------------------------------------------------ steps and groups
    def steps(self, phase: Phase) -> list[Step]:
        """The algorithm's steps for a phase (they do not depend on its bytes)."""
        key = (phase.dims, phase.members, phase.algorithm, phase.collective, phase.direction,
               phase.root, phase.variant, phase.in_network)
        steps = self._steps.get(key)
        if steps is None:
            steps = self._steps[key] = self._make_steps(phase)
        return steps

    def _make_steps(self, phase: Phase) -> list[Step]:
        if phase.in_network:
            return [Step(np.zeros(1, np.int64), np.zeros(1, np.int64), 1.0)]
        p = len(phase.members) or int(np.prod([self.network.dims[d] for d in phase.dims]))
        return base_algorithm(phase.algorithm).steps(phase.collective, p, phase.direction,
                                                     self._local_root(phase), phase.variant)

    def _local_root(self, phase: Phase) -> int:
        if phase.members:
            return phase.members.index(phase.root) if phase.root in phase.members else 0
        coords = self.network.coords(phase.root)[0]
        local, scale = 0, 1
        for d in phase.dims:
            local += int(coords[d]) * scale
            scale *= self.network.dims[d]
        return local

    def dims_used(self, phase: Phase) -> tuple[int, ...]:
        """Dimensions whose links a phase may use (for an explicit group: where it varies)."""
        if not phase.members:
            return phase.dims
        coords = self.network.coords(np.array(phase.members))
        return tuple(d for d in range(self.network.ndims) if np.ptp(coords[:, d]) > 0)

    def groups(self, phase: Phase) -> np.ndarray:
        """The groups taking part in a phase, shape (groups, size)."""
        key = (phase.dims, phase.members, phase.collective, phase.root, phase.scope)
        groups = self._groups.get(key)
        if groups is None:
            groups = self._groups[key] = self._find_groups(phase)
        return groups

    def _find_groups(self, phase: Phase) -> np.ndarray:
        if phase.members:
            return np.array([phase.members], dtype=np.int64)
        net = self.network
        groups = net.shared_dim_groups(phase.dims)
        if phase.collective in ("broadcast", "reduce"):
            # only groups that hold (broadcast) or still owe (reduce) the root's data
            root = net.coords(phase.root)[0]
            coords = net.coords(groups[:, 0])
            d = phase.dims[0]
            keep = np.ones(groups.shape[0], bool)
            for e in range(net.ndims):
                if e in phase.dims:
                    continue
                if (phase.collective == "broadcast" and e > d) or \
                        (phase.collective == "reduce" and e < d):
                    keep &= coords[:, e] == root[e]
            groups = groups[keep]
        if phase.scope:
            groups = groups[np.isin(groups[:, 0], phase.scope)]
        return groups

    # ------------------------------------------------------------------ routed steps
    def templates(self, phase: Phase, *, with_dependencies: bool = False
                  ) -> list[StepTemplate]:
        """Routed steps of a phase on its groups. ``with_dependencies`` adds, per message, the
        previous step's messages into its sender (per-NPU synchronisation)."""
        lowest = phase.flat and self.lowest_dim_for_flat
        key = (phase.dims, phase.algorithm, phase.collective, phase.direction,
               phase.in_network, phase.root if phase.collective in ("broadcast", "reduce")
               else 0, lowest, phase.variant, phase.members, with_dependencies, phase.scope)
        cached = self._templates.get(key)
        if cached is not None:
            return cached
        if with_dependencies and self.quotient is not None:
            raise SymmetryBroken(None)
        groups = self.groups(phase)
        copies = 1
        if self.replicate and replicable_phase(phase) and not with_dependencies:
            groups, copies = groups[:1], groups.shape[0]
        out = []
        previous: tuple[bytes, bytes] | None = None
        previous_dst = None
        # steps with the same messages (every step of a ring) share one routed template
        same: dict[tuple, StepTemplate] = {}
        for step in self.steps(phase):
            shape = (step.src.tobytes(), step.dst.tobytes(),
                     previous if with_dependencies else None)
            template = same.get(shape)
            if template is None:
                template = self._route_step(phase, groups, step, lowest)
                if previous_dst is not None and with_dependencies:
                    template.dep_indptr, template.dep_local = incoming(previous_dst,
                                                                       template.src)
                same[shape] = template
            if self.quotient is None:   # a reduced template carries its orbits' size
                template.copies = copies
            previous = shape[:2]
            previous_dst = template.dst
            out.append(template)
        self._templates[key] = out
        return out

    def _route_step(self, phase: Phase, groups: np.ndarray, step: Step,
                    lowest: bool) -> StepTemplate:
        if phase.in_network:
            up, down = self.network.switch_links(phase.dims[0])
            rows = self.network.instance_of(groups[:, 0], phase.dims[0])  # groups simulated
            src = dst = groups.ravel()
            links = np.stack([up[rows].ravel(), down[rows].ravel()],
                             axis=1).ravel().astype(np.int32)
            indptr = np.arange(0, links.size + 1, 2, dtype=np.int64)
            return self._reduced(make_template(self.network, src, dst, indptr, links))
        return self._reduced(route_messages(self.network, groups[:, step.src].ravel(),
                                            groups[:, step.dst].ravel(), lowest_dim_only=lowest))

    def _reduced(self, template: StepTemplate) -> StepTemplate:
        """The template on the quotient, if there is one."""
        return template if self.quotient is None else self.quotient.reduce(template)

    def delays(self, phase: Phase) -> list[float]:
        """The waits around a phase's steps (:func:`.cost.step_delays`)."""
        return cost.step_delays(self.system, self.steps(phase), phase.data,
                                phase.delay_passes)

    def dim_bytes_per_byte(self, template: StepTemplate) -> np.ndarray:
        return template.dim_bytes_per_byte(self.network.link_dim, self.network.ndims)

    def messages(self, src: np.ndarray, dst: np.ndarray) -> StepTemplate:
        """The routed point-to-point messages from NPUs ``src`` to ``dst`` (one each)."""
        key = (src.tobytes(), dst.tobytes())
        template = self._messages.get(key)
        if template is None:
            template = self._messages[key] = self._reduced(
                route_messages(self.network, src, dst))
        return template

    def plan(self, phase: Phase) -> PhasePlan:
        """Sizes, delays and accounting of a barrier phase, for timing it at once."""
        templates = self.templates(phase)
        key = (id(templates), phase.data, phase.delay_passes)
        plan = self._plans.get(key)
        if plan is None:
            sizes = [s.fraction * phase.data for s in self.steps(phase)]
            per_dim = [self.dim_bytes_per_byte(tp) * size for tp, size in zip(templates, sizes)]
            plan = self._plans[key] = PhasePlan(templates, sizes, self.delays(phase), per_dim)
        return plan

    def dag(self, phase: Phase) -> PhaseDag:
        """A phase's per-NPU DAG (per-NPU synchronisation and trees)."""
        key = (phase.dims, phase.algorithm, phase.collective, phase.direction,
               phase.in_network, phase.root, phase.variant, phase.flat, phase.members,
               phase.scope)
        dag = self._dags.get(key)
        if dag is None:
            templates = self.templates(phase, with_dependencies=True)
            dag = PhaseDag.build(templates, self.groups(phase).ravel())
            dag.idle_exit_delay = self.system.endpoint_delay_ns
            self._dags[key] = dag
        return dag
