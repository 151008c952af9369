"""Replaying steps alone: the flow model's shortcut for steps and phases whose links are free.

Max-min fair rates of flows that share no link with anything else in flight do not depend on
the rest of the network: a step whose links are free for as long as it sends evolves exactly
as it would alone. Ring and direct steps repeat thousands of times (every step of a ring,
every chunk, every group of every dimension), so the flow timer solves a step alone once per
(template, size) and replays the solution: a *virtual* step is one timer instead of its flows
and their events. A whole barrier phase whose links are free is replayed the same way.

A virtual step is *materialised* (its flows put into the engine with the bytes they still have
to send) as soon as anything that could share its links is added before it has finished
sending; a replayed phase is handed back to the scheduler at the step it is in. Deciding that
needs no knowledge of the future: a later step either avoids the claimed links, starts after
the claim ends, or materialises it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._arrays import gather_segments
from ..network import _kernels
from ..network.engine import FlowEngine
from .templates import StepTemplate

MARKER_PTR = np.zeros(2, np.int64)   # one flow without links: a timer
NO_LINKS = np.zeros(0, np.int32)


@dataclass(frozen=True)
class Alone:
    """A step's solution when it is alone on the network (times relative to its start)."""

    duration: float          # last arrival
    busy_links: np.ndarray   # links the step sends on
    busy_ns: np.ndarray      # how long each of them carries the step
    events: int
    rate_computations: int


@dataclass
class VirtualStep:
    """A step replayed from its solution alone (a timer due at its last arrival)."""

    template: StepTemplate
    nbytes: float
    release: float
    delay: float
    alone: Alone

    @property
    def start(self) -> float:
        return self.release + self.delay

    @property
    def end(self) -> float:
        return self.start + self.alone.duration


@dataclass
class VirtualPhase:
    """A barrier phase replayed step after step from the steps' solutions alone; ``resume``
    hands it back to the scheduler (index of the first unfinished step, its release)."""

    steps: list[VirtualStep]
    start: float
    resume: Callable[[int, float], None]
    links: np.ndarray    # every link of the phase, claimed until ``end``
    end: float           # the last step's last arrival


def run_alone(network, template: StepTemplate, nbytes: float,
              until: float | None = None) -> tuple[FlowEngine, np.ndarray]:
    """A fresh engine holding only this step, started at 0 and run to the end (or until
    ``until``, when it stops with the step's state at that time), and the network's ids of
    its links: the engine holds the links the step uses only (a step of a large network's
    quotient touches a few of its million links), in their order."""
    used, local = np.unique(template.links, return_inverse=True)
    engine = FlowEngine(network.engine_capacity[used], network.link_latency[used], "flow")
    latency, bottleneck = template.engine_paths()
    engine.add(template.indptr, local.astype(np.int32), template.flow_bytes(nbytes),
               release=0.0, path_latency=latency, path_bottleneck=bottleneck,
               multiplicity=template.multiplicity)
    if until is not None:
        group = engine.new_group()
        engine.add(MARKER_PTR, NO_LINKS, 0.0, release=until, group=group)
    engine.run()
    return engine, used


def solve_alone(network, template: StepTemplate, nbytes: float) -> Alone:
    """The step's solution alone on the network."""
    engine, used = run_alone(network, template, nbytes)
    finish = engine.flow_arrays("finish")
    busy = engine.link_busy[: used.size]
    carrying = np.nonzero(busy > 0)[0]
    return Alone(float(finish.max()) if finish.size else 0.0, used[carrying], busy[carrying],
                 engine.events, engine.rate_computations)


@dataclass(frozen=True)
class Remainder:
    """A virtual step's state at some time: what is still sending and what is in flight."""

    sending: np.ndarray      # flows still sending
    remaining: np.ndarray    # their bytes left
    arrival: np.ndarray      # absolute arrival times of the flows in flight (sent, not there)
    link_bytes: np.ndarray   # bytes every link has carried so far (each flow's copies)
    link_busy: np.ndarray    # busy time of every link so far
    events: int
    rate_computations: int


def remainder(network, virtual: VirtualStep, now: float) -> Remainder:
    """Re-run a virtual step alone up to ``now`` and report what is left of it."""
    template = virtual.template
    alone, used = run_alone(network, template, virtual.nbytes, until=now - virtual.start)
    n = template.src.size
    state = alone.flow_arrays("state")[:n]
    remaining = alone.flow_arrays("remaining")[:n]
    sending = np.nonzero(state == _kernels.SENDING)[0]
    flying = np.nonzero(state == _kernels.IN_FLIGHT)[0]
    arrival = virtual.start + alone.flow_arrays("send_end")[flying] + \
        alone.flow_arrays("latency")[flying]
    sent = np.asarray(template.flow_bytes(virtual.nbytes), np.float64) * np.ones(n)
    sent[sending] -= remaining[sending]
    if template.multiplicity is not None:
        sent = sent * template.multiplicity
    carried = np.bincount(template.links, weights=np.repeat(sent, np.diff(template.indptr)),
                          minlength=network.num_links)
    busy = np.zeros(network.num_links)
    busy[used] = alone.link_busy[: used.size]
    return Remainder(sending, remaining[sending], arrival, carried, busy, alone.events,
                     alone.rate_computations)


def overlapping_claims(steps: dict[int, VirtualStep], phases: dict[int, VirtualPhase],
                       links: np.ndarray, after: float, n_links: int) -> list[int]:
    """Tokens of the virtual steps and phases that still claim one of ``links`` after time
    ``after`` (a step claims each link until it stops sending on it; a phase every link of
    its steps until its last arrival)."""
    asked = np.zeros(n_links, bool)
    asked[links] = True
    hits = []
    for token, step in steps.items():
        ids = step.alone.busy_links
        mine = asked[ids]
        if mine.any() and (step.start + step.alone.busy_ns[mine] > after).any():
            hits.append(token)
    for token, replayed in phases.items():
        if replayed.end > after and asked[replayed.links].any():
            hits.append(token)
    return hits


def add_remainder(engine: FlowEngine, virtual: VirtualStep, rest: Remainder, group: int,
                  now: float) -> None:
    """Put what is left of a virtual step into ``engine`` in ``group``: its flows still sending,
    with the bytes they have left, and a marker for each flow in flight (arriving when it
    would have), or one at the step's end if nothing is left at all."""
    template = virtual.template
    sending = rest.sending
    counts = np.diff(template.indptr)[sending]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    latency, bottleneck = template.engine_paths()
    if sending.size:
        engine.add(indptr, template.links[gather_segments(template.indptr[sending], counts)],
                   rest.remaining, release=now, group=group,
                   path_latency=None if latency is None else latency[sending],
                   path_bottleneck=None if bottleneck is None else bottleneck[sending],
                   multiplicity=None if template.multiplicity is None else
                   template.multiplicity[sending])
    if rest.arrival.size or not sending.size:
        at = rest.arrival if rest.arrival.size else np.array(
            [max(now, virtual.start + virtual.alone.duration)])
        engine.add(np.zeros(at.size + 1, np.int64), NO_LINKS, 0.0, release=at, group=group)
