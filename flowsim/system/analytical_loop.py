"""The analytical model's training loop, compiled: which runs it takes, and its arrays.

Under the analytical model nothing a message does depends on another, so a training run is
an event loop over ops, dimension queues and a heap of known end times: the Python
:class:`~flowsim.system.workload_engine.WorkloadEngine` spends about 15 us of interpreter
per op on it (0.75 s for a 16,384-GPU Llama-3-405B iteration's 51,000 ops).
:func:`run_compiled` packs the ops into arrays once (:mod:`.loop_arrays`: phase lengths,
message times, queues and mailboxes resolved in Python with the scheduler's own objects) and
runs :func:`~._loop_kernels.run_loop`, which repeats the engine's arithmetic in its order:
the records are equal to the bit (``tests/test_analytical_loop.py``).

It takes the runs where every program tracks one NPU (uniform SPMD programs, pipeline
stages, or a trace per rank, whose collectives meet as :mod:`.rendezvous` matches them),
phases are barrier phases, and there are no memory, host or custom-collective ops, no
timeline and no cap on collectives in flight; anything else (one-rank programs beside
programs of many NPUs, too), and any run the loop reports a problem with (a deadlock, a
message nobody receives), goes to the Python engine, which raises the error. Small runs in
a process that has not loaded Numba stay in Python too, until they add up to
:data:`COMPILED_FROM_OPS` ops (loading Numba costs more than the loop saves below that: a
one-off small run never pays it, a sweep's points soon do); the results are the same
either way.
"""

from __future__ import annotations

import sys

import numpy as np

from ..results.stats import SimulationStats
from ..results.workload import RunRecord
from ..workload.graph import Workload
from . import loop_codes as code
from .accounting import TimeAccounts, layer_npus
from .config import SystemConfig
from .loop_arrays import Packed, Packer, pack
from .templates import flow_counts

#: the ops a process runs in the Python engine before the loop loads Numba (~0.55 s) when
#: nothing else has: the engine takes about 15 us per op, the compiled loop under 1 us, so a
#: run this big, or a sweep's points once they add up to it, are faster compiled
COMPILED_FROM_OPS = 20_000
#: ops this process ran in the Python engine for want of Numba
_python_ops = 0


def run_compiled(network, workload: Workload, system: SystemConfig, *, speed: np.ndarray,
                 compute=None, memory=None, collective_streams: int | None = None,
                 timeline: bool = False, replay: bool = True,
                 symmetry: bool = True) -> RunRecord | None:
    """Run ``workload`` under the analytical model in the compiled loop; ``None`` when the
    run is not one it takes (see the module docstring), or when the loop reports a problem:
    the caller then runs the Python engine. Takes :class:`WorkloadEngine`'s options."""
    # only memory ops use the memory servers; replay and the quotient are the flow model's
    del memory, replay, symmetry
    if timeline or collective_streams is not None or system.custom \
            or system.synchronization != "barrier":
        return None
    programs = []
    for program in workload.programs:
        npus = np.sort(program.npus)
        if np.any(speed[npus] != speed[npus[0]]):
            return None   # NPUs of one program at different speeds: per-NPU times
        programs.append(npus)
    if len(programs) > 1 and 0 < sum(npus.size == 1 for npus in programs) < len(programs):
        return None   # one-NPU programs beside others: their meetings count those too
    global _python_ops
    if "numba" not in sys.modules and _python_ops < COMPILED_FROM_OPS:
        ops = sum(len(program.ops) for program in workload.programs)
        if _python_ops + ops < COMPILED_FROM_OPS:
            _python_ops += ops   # loading Numba would cost more than the loop saves, so far
            return None
    packed = pack(network, workload, system, programs, speed, compute)
    if packed is None:
        return None
    from ._loop_kernels import run_loop

    (status, _, ist, npu_state, layers, dim_bytes, busy_kind, busy_ref, busy_span,
     coll_end) = run_loop(*packed.arrays, *packed.sizes)
    if status:
        return None
    return _record(network, workload, programs, packed, ist, npu_state, layers, dim_bytes,
                   (busy_kind, busy_ref, busy_span), coll_end)


def _record(network, workload: Workload, programs: list[np.ndarray], packed: Packed, ist,
            npu_state, layers, dim_bytes, busy: tuple, coll_end: float) -> RunRecord:
    """The run's :class:`RunRecord`, as the Python engine writes it, from the loop's
    results (``busy``: its spans' kinds, phases or ops, and start and end times)."""
    packer, si = packed.packer, packed.si
    accounts = TimeAccounts(network.npus, len(workload.layers))
    (_, accounts.local_end, accounts.npu_finish, accounts.npu_compute,
     accounts.npu_exposed, accounts.npu_bubble) = np.ascontiguousarray(npu_state.T)
    for npus in programs:   # a program's NPUs all did what its first did
        if npus.size > 1:
            for values in (accounts.npu_finish, accounts.npu_compute, accounts.npu_exposed,
                           accounts.npu_bubble, accounts.local_end):
                values[npus] = values[npus[0]]
    accounts.layer_compute, accounts.layer_exposed, accounts.layer_comm = layers
    accounts.layer_programs = _layer_programs(si, ist, len(workload.layers) + 1)
    collectives, sends = packed.collectives, packed.sends
    stats = np.array(packer.shape_stats, np.int64).reshape(-1, 4)[collectives].sum(axis=0) \
        if collectives.size else np.zeros(4, np.int64)
    sent, sent_represented = flow_counts(t for _, t in sends)
    flows, represented = int(stats[0]) + sent, int(stats[1]) + sent_represented
    steps = int(stats[2]) + len(sends)
    time_ns = max(float(accounts.npu_finish.max(initial=0.0)), float(coll_end))
    return accounts.record(
        time_ns=time_ns, dim_bytes=dim_bytes, layer_npus=layer_npus(
            accounts.layer_programs, programs),
        dim_busy_ns=_dim_busy(network.ndims, packer, sends, *busy),
        collectives=int(collectives.size),
        messages=int(sum(programs[p].size
                         for p in si[code.PROGRAM][si[code.KIND] == code.SEND])),
        stats=SimulationStats(flows=represented, simulated_flows=flows, steps=steps, events=steps,
                              rate_computations=0, reused_steps=0), timeline=[])


def _layer_programs(si: np.ndarray, ist: np.ndarray, n_rows: int) -> list[set[int]]:
    """Programs charged per layer row: every compute and collective op, and the
    communication ops a wait was charged to."""
    charged = (si[code.KIND] == code.COMPUTE) | (si[code.KIND] == code.COLLECTIVE) | \
        (ist[:, code.EXPOSED_CHARGED] == 1)
    width = int(si[code.PROGRAM].max(initial=0)) + 1
    pairs = np.unique(si[code.ROW][charged] * width + si[code.PROGRAM][charged])
    out: list[set[int]] = [set() for _ in range(n_rows)]
    for pair in pairs.tolist():
        out[pair // width].add(pair % width)
    return out


def _dim_busy(ndims: int, packer: Packer, sends: list, busy_kind: np.ndarray,
              busy_ref: np.ndarray, busy_span: np.ndarray) -> np.ndarray:
    """Per dimension, how long at least one of its phases or messages ran (the ledger's
    spans, in the order it received them)."""
    from .._arrays import union_length

    phase_mask = np.zeros((len(packer.phase_dims), ndims), bool)
    for p, dims in enumerate(packer.phase_dims):
        phase_mask[p, list(dims)] = True
    uses = np.zeros((busy_kind.size, ndims), bool)
    phases = busy_kind == code.PHASE_DONE
    uses[phases] = phase_mask[busy_ref[phases]]
    if sends:
        ops = np.array([g for g, _ in sends], np.int64)
        send_mask = np.zeros((len(sends), ndims), bool)
        for k, (_, template) in enumerate(sends):
            send_mask[k, list(template.dims_between(packer.network))] = True
        messages = ~phases
        uses[messages] = send_mask[np.searchsorted(ops, busy_ref[messages])]
    return np.array([union_length(busy_span[0][uses[:, d]], busy_span[1][uses[:, d]])
                     for d in range(ndims)])
