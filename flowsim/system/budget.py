"""The work budget: a run whose simulated work is beyond reach is refused before it starts,
with the estimate in the message, instead of running for days.

Memory is bounded by the input caps (at most 2**22 NPUs, ...); time is not: a ring of
4,194,304 NPUs fits in memory, but its all-reduce has 2(p-1) steps of p messages each, about
3.5e13 message-steps. The estimate counts, in **work units**:

* every message of every step the engine times (one group per dimension when the groups are
  replicas, see :func:`~flowsim.system.scheduler.can_replicate`; every group otherwise), for
  every chunk;
* :data:`STEP_COST` units per step (its fixed Python cost);
* per workload op, one unit per NPU of its program plus :data:`OP_COST`.

One unit is roughly 10 to 100 ns of engine time on a current core (the analytical model is at
the fast end, the flow model at the slow one). The default budget :data:`DEFAULT_MAX_WORK`
(1e11 units, minutes to an hour) leaves every bundled config, benchmark and a 131,072-GPU
training iteration far below it; raise it with ``max_work=`` (Python) or ``--max-work``
(command line). ``max_work=math.inf`` turns the check off.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .._validate import as_number
from ..collectives import base_algorithm
from ..errors import ConfigError, FlowsimWarning
from .phases import Phase

#: Work units a run may take unless told otherwise.
DEFAULT_MAX_WORK = 1e11
#: Units charged per step (its fixed cost: events, queues, a numpy call).
STEP_COST = 100
#: Units charged per workload op beyond one per NPU.
OP_COST = 100


def check_max_work(value: Any) -> float:
    """The budget argument: ``None`` (the default budget) or a number > 0 (``inf``: none)."""
    if value is None:
        return DEFAULT_MAX_WORK
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf:
        return math.inf
    return as_number(value, source="argument", key="max_work", positive=True)


def algorithm_work(algorithm: str, collective: str, p: int) -> tuple[int, int]:
    """``(steps, messages summed over the steps)`` of one group of ``p`` ranks, in closed
    form (the tests check it against the algorithms' step lists)."""
    if p < 2:
        return 0, 0
    name = base_algorithm(algorithm).name
    rooted = collective in ("broadcast", "reduce")
    log = max(1, (p - 1).bit_length())
    if name == "ring":
        steps = {"all_reduce": 2 * (p - 1), "all_to_all": p * (p - 1) // 2}.get(collective,
                                                                               p - 1)
        return steps, steps * (1 if rooted else p)
    if name == "direct":
        if rooted:
            return 1, p - 1
        steps = 2 if collective == "all_reduce" else 1
        return steps, steps * p * (p - 1)
    if name == "halvingDoubling":
        if rooted:
            return log, p - 1
        steps = 2 * log if collective == "all_reduce" else log
        return steps, steps * p
    if name == "doubleBinaryTree":
        depth = max(1, p.bit_length() - 1)
        return (depth, p - 1) if rooted else (2 * depth, 2 * (p - 1))
    added = base_algorithm(algorithm).steps(collective, p, 1, 0, 0)  # a newly added one
    return len(added), sum(int(s.src.size) for s in added)


def phase_work(network, phase: Phase, replicate: bool, npus: int | None = None) -> float:
    """Work units of one phase of one chunk (on ``npus`` NPUs: default all, or the scope)."""
    if phase.in_network:
        return 2 * (STEP_COST + network.npus)
    if phase.members:
        p, groups = len(phase.members), 1
    else:
        p = math.prod(network.dims[d] for d in phase.dims)
        npus = len(phase.scope) if phase.scope else (npus or network.npus)
        groups = 1 if replicate else max(1, npus // max(p, 1))
    steps, messages = algorithm_work(phase.algorithm, phase.collective, p)
    return steps * STEP_COST + groups * messages


def collective_work(network, chunks: list[list[Phase]], replicate: bool,
                    npus: int | None = None) -> float:
    """Work units of one collective (the phase lists of its chunks); ``npus``: the NPUs of
    the program issuing it, when fewer than the network's."""
    cache: dict[Phase, float] = {}
    total = 0.0
    for phases in chunks:
        for phase in phases:
            if phase not in cache:
                cache[phase] = phase_work(network, phase, replicate, npus)
            total += cache[phase]
    return total


def workload_work(network, system, workload, replicate: bool) -> float:
    """Work units of a workload run: its ops, and the collectives they issue (collectives
    of one shape priced once and counted; a collective met by one-NPU programs counted once,
    not per member)."""
    total = 0.0
    priced: dict[tuple, float] = {}
    meeting = len(workload.programs) > 1   # one-NPU programs meet in their collectives
    custom = dict(system.custom)
    for program in workload.programs:
        n = int(program.npus.size)
        kinds = [op.kind for op in program.ops]
        total += len(kinds) * (n + OP_COST) + \
            (kinds.count("send") + kinds.count("recv")) * (STEP_COST + n)
        shapes: dict[tuple, list] = {}   # shape -> [an op of it, how many]
        for op in program.ops:
            if op.kind == "collective" and op.collective not in custom:
                key = (op.collective, op.dims, op.group,
                       min(system.splits, max(int(op.size), 1)), n)
                entry = shapes.setdefault(key, [op, 0])
                entry[1] += 1
        for key, (op, count) in shapes.items():
            if key not in priced:
                priced[key] = _collective_work(network, system, op, replicate, n, meeting)
            total += priced[key] * count
    return total


def _collective_work(network, system, op, replicate: bool, n: int, meeting: bool) -> float:
    """Work units of collective op ``op`` issued by a program of ``n`` NPUs."""
    from .phases import chunk_sizes, collective_phases

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)   # the engine warns
            chunks = [collective_phases(network, system, op.collective, float(c),
                                        dims=op.dims, group=op.group)
                      for c in chunk_sizes(max(int(op.size), 1), system.splits)]
    except ConfigError:
        chunks = []   # the engine reports it when the op runs
    work = collective_work(network, chunks, replicate, n)
    return work / _members(network, op) if meeting and n == 1 else work


def _members(network, op) -> int:
    """NPUs taking part in one instance of a collective op."""
    if op.group:
        return len(op.group)
    dims = range(network.ndims) if op.dims is None else op.dims
    return max(1, math.prod(network.dims[d] for d in dims))


def check_work(work: float, max_work: float, what: str) -> None:
    """Refuse a run whose estimated work exceeds the budget.

    Raises
    ------
    ConfigError
        With the estimate and how to raise the budget.
    """
    if work > max_work:
        error = ConfigError(
            f"argument 'max_work': this {what} needs about {work:.3g} work units of "
            f"simulation, more than the budget of {max_work:.3g} (see flowsim.system.budget); "
            f"raise it with max_work= (Python) or --max-work (command line), or simulate a "
            f"smaller platform")
        error.key, error.expected = "max_work", f"at least {work:.3g}"
        raise error
