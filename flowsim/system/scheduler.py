"""The system layer's scheduler: chunks through dimension queues, steps onto a timer.

Each chunk of a collective walks through its phases (see :mod:`.phases`). Every dimension is a
queue that runs at most ``active-chunks-per-dimension`` chunks at once; waiting chunks are
served by priority (LIFO: the most recently issued collective first; FIFO: the oldest), and in
arrival order among equal priorities (all chunks of one collective share a priority, as in
ASTRA-sim). A phase pays one endpoint delay before its first step and, after every step, one
endpoint delay plus the local-reduction cost of what it received.

Step synchronisation:

``barrier`` (ASTRA-sim)
    A step's messages on every group start together once the previous step has completely
    finished.
``per_npu``
    A rank starts its next step as soon as it has received what the previous step sent it;
    the phase ends when its last message has arrived.

The network model only decides how long steps take (see :mod:`.backends`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..collectives import base_algorithm
from ..collectives.base import Step
from ..results import union_length
from ..topology import Network
from .backends import AnalyticalTimer, PhaseDag, StepTemplate, _incoming, make_template
from .config import SystemConfig
from .flow_timer import FlowTimer
from .per_npu import PerNpuPhases
from .phase_plan import PhasePlan
from .phases import Phase


@dataclass
class _Chunk:
    collective_id: int
    index: int
    phases: list[Phase]
    key: int
    phase: int = 0


class Schedule(PerNpuPhases):
    """Runs collectives on one network under one system config and network model.

    Parameters
    ----------
    network : Network
    system : SystemConfig
    model : {"analytical", "flow"}
    """

    def __init__(self, network: Network, system: SystemConfig, model: str,
                 trace: bool = False, replicate: bool = False) -> None:
        self.network = network
        #: simulate only the first group of every phase (see :func:`can_replicate`)
        self.replicate = replicate
        self.represented_flows = 0
        #: step log for timelines (see :mod:`flowsim.trace`), kept only when tracing
        self.trace_log: list[dict] | None = [] if trace else None
        self.system = system
        self.model = model
        self.timer = AnalyticalTimer(network) if model == "analytical" else \
            FlowTimer(network, keep_flows=trace)
        self._queues: dict[int, list] = {}
        self._running: dict[int, int] = {}
        self._seq = itertools.count()
        self._counter = 0
        self._on_done: dict[int, Callable[[float], None]] = {}
        #: bytes sent per dimension, every group counted
        self.dim_bytes = np.zeros(network.ndims)
        self._templates: dict[tuple, list[StepTemplate]] = {}
        self._actions: dict[int, tuple[Callable, tuple]] = {}
        self.collective_end: dict[int, float] = {}
        self._chunks_left: dict[int, int] = {}
        self.npu_finish = np.zeros(network.npus)
        self._busy: dict[int, list[tuple[float, float]]] = {d: [] for d in
                                                             range(network.ndims)}
        # per-NPU synchronisation: phases added up front as DAGs (see _issue_per_npu)
        self._static: list[tuple[int, Phase, np.ndarray, np.ndarray, np.ndarray]] = []
        self._slots: dict[int, list[np.ndarray]] = {}
        self._slot_turn: dict[int, int] = {}
        self._dags: dict[tuple, PhaseDag] = {}
        self._group_cache: dict[tuple, np.ndarray] = {}
        #: analytical model: per (phase templates, bytes), how to time the phase at once
        self._phase_plans: dict[tuple[int, float], PhasePlan] = {}
        self._step_cache: dict[tuple, list[Step]] = {}

    # ------------------------------------------------------------------ public
    def issue(self, chunks: list[list[Phase]], at: float = 0.0, *,
              on_done: Callable[[float], None] | None = None,
              policy: str | None = None) -> int:
        """Issue one collective (the phase list of each chunk) at time ``at``; returns its id.

        ``on_done(t)`` is called when its last chunk has finished. ``policy`` (``LIFO``,
        ``FIFO`` or ``highest``) overrides the system's scheduling policy for this collective.
        """
        if on_done is not None:
            self._on_done[len(self._chunks_left)] = on_done
        if self._per_npu(chunks):
            return self._issue_per_npu(chunks, at)
        cid = len(self._chunks_left)
        self._chunks_left[cid] = len(chunks)
        self.collective_end[cid] = at
        key = self._priority_key(policy or self.system.scheduling_policy)
        for i, phases in enumerate(chunks):
            chunk = _Chunk(cid, i, phases, key)
            if phases:
                self._enqueue(chunk)
            else:
                self._chunk_done(chunk, at)
        return cid

    def run(self) -> None:
        """Advance until every issued collective has finished."""
        while self.advance():
            pass
        if self._static:   # per-NPU phases nothing waits for: run them out
            self.timer.run_all()
            self._resolve_static()

    def advance(self) -> bool:
        """Handle the next batch of due events (step and phase ends, timers); ``False`` when
        nothing is pending. Collectives issued since the last call compete for the queues
        by priority (LIFO / FIFO) before time moves on."""
        self._admit(self.timer.now)
        if not self._actions:
            return False
        for token, t in self.timer.run():
            callback, args = self._actions.pop(token)
            callback(*args, t)
        self._admit(self.timer.now)
        return True

    def at(self, t: float, callback: Callable[..., None], *args) -> None:
        """Call ``callback(*args, t)`` at time ``t`` (>= now) from :meth:`advance`."""
        self._actions[self.timer.timer(t)] = (callback, args)

    def finish(self) -> None:
        """After the last :meth:`advance`: resolve per-NPU phases for the statistics."""
        self._resolve_static()

    @property
    def now(self) -> float:
        return self.timer.now

    def message(self, template: StepTemplate, nbytes: float, release: float, delay: float,
                callback: Callable[[float], None]) -> None:
        """Send the messages of ``template`` (``nbytes`` each) after ``release + delay``;
        ``callback(t)`` when the last has arrived."""
        token = self.timer.step(template, nbytes, release, delay)
        self._count_dim_bytes(template, nbytes)
        dims = self._template_dims(template)
        start = release + delay

        def arrived(t: float) -> None:
            for d in dims:
                self._busy[d].append((start, t))
            callback(t)

        self._actions[token] = (arrived, ())

    def _template_dims(self, template: StepTemplate) -> tuple[int, ...]:
        """Logical dimensions whose links a template's messages cross."""
        ids, _ = template.link_bytes_per_byte
        return tuple(int(d) for d in np.unique(self.network.link_dim[ids]) if d >= 0)

    def _priority_key(self, policy: str) -> float:
        """Queue key (smallest served first) from ASTRA-sim's priorities: one counter that
        LIFO issues count up and FIFO issues count down; ``highest`` beats both."""
        if policy == "highest":
            return -1e18
        priority = self._counter
        self._counter += 1 if policy == "LIFO" else -1
        return -priority

    def expand_replicated(self, per_link: np.ndarray) -> np.ndarray:
        """Copy the first instance's per-link values of every dimension to all its instances
        (the identity unless this schedule replicates)."""
        if not self.replicate:
            return per_link
        net = self.network
        out = per_link.copy()
        offsets = list(net._dim_link_offset) + [net.num_links]
        for d in range(net.ndims):
            start, stop = offsets[d], offsets[d + 1]
            instances = net.npus // net.dims[d]
            per_instance = (stop - start) // instances
            out[start:stop] = np.tile(per_link[start: start + per_instance], instances)
        return out

    def dim_busy_ns(self) -> np.ndarray:
        """Per dimension, the time during which at least one of its phases was running."""
        out = np.zeros(self.network.ndims)
        for d, spans in self._busy.items():
            if spans:
                arr = np.array(spans)
                out[d] = union_length(arr[:, 0], arr[:, 1])
        return out

    # ------------------------------------------------------------------ queues
    def _enqueue(self, chunk: _Chunk) -> None:
        queue = chunk.phases[chunk.phase].queue
        heapq.heappush(self._queues.setdefault(queue, []), (chunk.key, next(self._seq), chunk))

    def _admit(self, now: float) -> None:
        limit = self.system.active_chunks
        for queue, waiting in self._queues.items():
            while waiting and self._running.get(queue, 0) < limit:
                _, _, chunk = heapq.heappop(waiting)
                self._running[queue] = self._running.get(queue, 0) + 1
                self._start_phase(chunk, now)

    def _phase_done(self, chunk: _Chunk, start: float, t: float) -> None:
        phase = chunk.phases[chunk.phase]
        for d in self._dims_used(phase):
            self._busy[d].append((start, t))
        self.npu_finish[self._groups(phase).ravel()] = t
        self._running[phase.queue] -= 1
        chunk.phase += 1
        if chunk.phase < len(chunk.phases):
            self._enqueue(chunk)
        else:
            self._chunk_done(chunk, t)

    def _chunk_done(self, chunk: _Chunk, t: float) -> None:
        cid = chunk.collective_id
        self._chunks_left[cid] -= 1
        self.collective_end[cid] = max(self.collective_end[cid], t)
        if self._chunks_left[cid] == 0 and cid in self._on_done:
            self._on_done.pop(cid)(t)

    # ------------------------------------------------------------------ phases and steps
    def _steps(self, phase: Phase) -> list[Step]:
        """The algorithm's steps for a phase (cached: they do not depend on its bytes)."""
        key = (phase.dims, phase.members, phase.algorithm, phase.collective, phase.direction,
               phase.root, phase.variant, phase.in_network)
        steps = self._step_cache.get(key)
        if steps is None:
            steps = self._step_cache[key] = self._make_steps(phase)
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

    def _dims_used(self, phase: Phase) -> tuple[int, ...]:
        """Dimensions whose links a phase may use (for an explicit group: where it varies)."""
        if not phase.members:
            return phase.dims
        coords = self.network.coords(np.array(phase.members))
        return tuple(d for d in range(self.network.ndims) if np.ptp(coords[:, d]) > 0)

    def _groups(self, phase: Phase) -> np.ndarray:
        """The groups taking part in a phase, shape (groups, size) (cached per phase)."""
        key = (phase.dims, phase.members, phase.collective, phase.root, phase.scope)
        groups = self._group_cache.get(key)
        if groups is None:
            groups = self._group_cache[key] = self._find_groups(phase)
        return groups

    def _find_groups(self, phase: Phase) -> np.ndarray:
        if phase.members:
            return np.array([phase.members], dtype=np.int64)
        groups = self.network.dim_groups(phase.dims)
        if phase.collective in ("broadcast", "reduce"):
            # only groups that hold (broadcast) or still owe (reduce) the root's data
            root = self.network.coords(phase.root)[0]
            coords = self.network.coords(groups[:, 0])
            d = phase.dims[0]
            keep = np.ones(groups.shape[0], bool)
            for e in range(self.network.ndims):
                if e in phase.dims:
                    continue
                if (phase.collective == "broadcast" and e > d) or \
                        (phase.collective == "reduce" and e < d):
                    keep &= coords[:, e] == root[e]
            groups = groups[keep]
        if phase.scope:
            groups = groups[np.isin(groups[:, 0], phase.scope)]
        return groups

    def _templates_for(self, phase: Phase, steps: list[Step], *,
                       with_dependencies: bool = False) -> list[StepTemplate]:
        """Routed steps of a phase on its groups (cached). ``with_dependencies`` adds, per
        message, the previous step's messages into its sender (per-NPU synchronisation)."""
        # ASTRA-sim's analytical backend charges a message only for the lowest dimension it
        # crosses; that matters only for flat (one*) algorithms, whose messages cross several.
        lowest = phase.flat and self.model == "analytical"
        key = (phase.dims, phase.algorithm, phase.collective, phase.direction,
               phase.in_network, phase.root if phase.collective in ("broadcast", "reduce")
               else 0, lowest, phase.variant, phase.members, with_dependencies, phase.scope)
        cached = self._templates.get(key)
        if cached is not None:
            return cached
        groups = self._groups(phase)
        copies = 1
        if self.replicate and replicable_phase(phase) and not with_dependencies:
            groups, copies = groups[:1], groups.shape[0]
        out = []
        previous: tuple[bytes, bytes] | None = None
        previous_dst = None
        # steps with the same messages (every step of a ring) share one routed template
        same: dict[tuple, StepTemplate] = {}
        for step in steps:
            shape = (step.src.tobytes(), step.dst.tobytes(),
                     previous if with_dependencies else None)
            template = same.get(shape)
            if template is None:
                template = self._route_step(phase, groups, step, lowest)
                if previous_dst is not None and with_dependencies:
                    template.dep_indptr, template.dep_local = _incoming(previous_dst,
                                                                        template.src)
                same[shape] = template
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
        else:
            src = groups[:, step.src].ravel()
            dst = groups[:, step.dst].ravel()
            message, weight, indptr, links = self.network.routes_multipath(
                src, dst, lowest_dim_only=lowest)
            if not np.array_equal(message, np.arange(src.size)):  # split over several paths
                return make_template(self.network, src[message], dst[message], indptr, links,
                                     message=message, weight=weight)
        return make_template(self.network, src, dst, indptr, links)

    def _dim_bytes_per_byte(self, template: StepTemplate) -> np.ndarray:
        """Bytes a template's step puts on each dimension per byte of message (cached)."""
        per_dim = template._cache.get("dim_bytes")
        if per_dim is None:
            ids, per_byte = template.link_bytes_per_byte
            dims = self.network.link_dim[ids]
            known = dims >= 0  # fabric links belong to no logical dimension
            per_dim = np.bincount(dims[known], weights=per_byte[known],
                                  minlength=self.network.ndims) * template.copies
            template._cache["dim_bytes"] = per_dim
        return per_dim

    def _count_dim_bytes(self, template: StepTemplate, nbytes: float) -> None:
        self.dim_bytes += self._dim_bytes_per_byte(template) * nbytes

    def _post_step_delay(self, phase: Phase, step: Step) -> float:
        return self.system.endpoint_delay_ns + self.system.reduction_ns(
            step.reduce_fraction * phase.data)

    def _start_phase(self, chunk: _Chunk, t: float) -> None:
        phase = chunk.phases[chunk.phase]
        if base_algorithm(phase.algorithm).per_npu_only:
            self._start_dag_phase(chunk, phase, t)
            return
        steps = self._steps(phase)
        templates = self._templates_for(phase, steps)
        if self.trace_log is None:
            plan = self._plan(phase, steps, templates)
            if self.model == "analytical":
                self._time_phase(chunk, plan, t)
                return
            if self._replay_phase(chunk, steps, plan, t):
                return
        self._start_step(chunk, steps, templates, 0, t, t, self.system.endpoint_delay_ns)

    def _plan(self, phase: Phase, steps: list[Step], templates: list[StepTemplate]
              ) -> PhasePlan:
        """Sizes, delays and accounting of a barrier phase, for timing it at once (cached)."""
        key = (id(templates), phase.data)
        plan = self._phase_plans.get(key)
        if plan is None:
            sizes = [s.fraction * phase.data for s in steps]
            delays = [self.system.endpoint_delay_ns] + [self._post_step_delay(phase, s)
                                                        for s in steps]
            per_dim = [self._dim_bytes_per_byte(tp) * size for tp, size in zip(templates, sizes)]
            # the plan references the templates, so their ids stay unique
            plan = self._phase_plans[key] = PhasePlan(templates, sizes, delays, per_dim)
        return plan

    def _time_phase(self, chunk: _Chunk, plan: PhasePlan, t: float) -> None:
        """The analytical model: a phase's steps never wait for anything but each other, so
        its end is known when it starts; one timer instead of an event per step (the same
        additions, in the same order, as step by step)."""
        for template, size, count in plan.usage:
            self.timer.account(template, size, count)
        self.dim_bytes += plan.dim_bytes
        self.represented_flows += plan.represented
        token = self.timer.timer(plan.analytical_end(t))
        self._actions[token] = (self._phase_done, (chunk, t))

    def _replay_phase(self, chunk: _Chunk, steps: list[Step], plan: PhasePlan,
                      t: float) -> bool:
        """The flow model: replay a whole phase whose links are free from its steps'
        solutions alone (see :meth:`FlowTimer.replay_phase`); ``False`` if they are not.

        If something later needs its links, the phase goes back to the step path from the
        step it is in."""
        token = -1

        def resume(index: int, release: float) -> None:
            del self._actions[token]
            # the steps from ``index`` on were counted with the phase; the step path recounts
            for per_dim, template in zip(plan.step_dim_bytes[index:], plan.templates[index:]):
                self.dim_bytes -= per_dim
                self.represented_flows -= template.src.size * template.copies
            if index < len(steps):
                self._start_step(chunk, steps, plan.templates, index, t, release,
                                 plan.delays[index])
            else:
                self._after_last_step(chunk, steps, t, release)

        token = self.timer.replay_phase(plan, t, resume)
        if token is None:
            return False
        self.dim_bytes += plan.dim_bytes
        self.represented_flows += plan.represented
        self._actions[token] = (self._phase_done, (chunk, t))
        return True

    def _start_step(self, chunk: _Chunk, steps: list[Step], templates: list[StepTemplate],
                    index: int, phase_start: float, release: float, delay: float) -> None:
        phase = chunk.phases[chunk.phase]
        nbytes = steps[index].fraction * phase.data
        entry = None
        if self.trace_log is not None:
            entry = {"template": templates[index], "nbytes": nbytes, "chunk": chunk.index,
                     "phase": chunk.phase, "step": index, "dims": phase.dims,
                     "label": f"{phase.collective} {phase.algorithm}",
                     "start": release + delay, "end": np.nan,
                     "flows": getattr(self.timer, "engine", None) and
                     self.timer.engine.num_flows}
            self.trace_log.append(entry)
        template = templates[index]
        token = self.timer.step(template, nbytes, release, delay)
        self.represented_flows += template.src.size * template.copies
        self._count_dim_bytes(template, nbytes)
        self._actions[token] = (self._step_done,
                                (chunk, steps, templates, index, phase_start, entry))

    def _step_done(self, chunk: _Chunk, steps: list[Step], templates: list[StepTemplate],
                   index: int, phase_start: float, entry: dict | None, t: float) -> None:
        if entry is not None:
            entry["end"] = t
        if index + 1 < len(steps):
            post = self._post_step_delay(chunk.phases[chunk.phase], steps[index])
            self._start_step(chunk, steps, templates, index + 1, phase_start, t, post)
        else:
            self._after_last_step(chunk, steps, phase_start, t)

    def _after_last_step(self, chunk: _Chunk, steps: list[Step], phase_start: float,
                         t: float) -> None:
        post = self._post_step_delay(chunk.phases[chunk.phase], steps[-1])
        token = self.timer.timer(t + post)
        self._actions[token] = (self._phase_done, (chunk, phase_start))



def can_replicate(network: Network, system: SystemConfig, chunks: list[list[Phase]],
                  trace: bool) -> bool:
    """Whether simulating one group per phase gives every group's timing exactly.

    The groups of one dimension are replicas: the same link structure, bandwidth and latency,
    and their flows never share a link with another group's. Under barrier synchronisation they
    all start every step together, so each sees exactly what the first one sees. That holds for
    per-dimension phases of all-reduce, reduce-scatter, all-gather and all-to-all; not for flat
    (``one*``) phases, whose messages cross dimensions, nor for broadcast and reduce, which run
    on some groups only.
    """
    if trace or system.synchronization != "barrier" or not network.replicable:
        return False
    return all(replicable_phase(ph) for phases in chunks for ph in phases)


def replicable_phase(phase: Phase) -> bool:
    """Whether one group of this phase stands for all of them (see :func:`can_replicate`)."""
    return (len(phase.dims) == 1 and not phase.flat and not phase.members and
            phase.collective in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
            and not base_algorithm(phase.algorithm).per_npu_only)
