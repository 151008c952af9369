"""The training-loop event loop of the analytical model, compiled (plain arrays in).

:func:`run_loop` is :class:`~flowsim.system.workload_engine.WorkloadEngine` with the
:class:`~flowsim.system.scheduler.Schedule` and the
:class:`~flowsim.system.analytical_timer.AnalyticalTimer` under it, for the runs
:mod:`.analytical_loop` accepts (one tracked NPU per program, barrier phases, no memory,
host or custom ops). It does the same float operations in the same order, so its results
are the Python engine's to the bit; ``tests/test_analytical_loop.py`` compares the two on
every kind of workload. :mod:`.analytical_loop` packs the arrays and documents them.

The state lives in a few arrays indexed by the row constants below; the helpers take them
instead of closing over them (Numba caches no closures).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# op kinds
COMPUTE, COLLECTIVE, SEND, RECV = 0, 1, 2, 3
# rows of the static float op table
DURATION, GAP, UPDATE_DELAY, MESSAGE_NS = 0, 1, 2, 3
# rows of the static int op table
KIND, PROGRAM, ORDER, ROW, COL, SHAPE, POLICY, MAILBOX, SIZE = 0, 1, 2, 3, 4, 5, 6, 7, 8
# rows of the float op state
END, SEEN, READY, PIPELINE, WAIT_BASE, ISSUED, COLL_END = 0, 1, 2, 3, 4, 5, 6
# rows of the int op state
REMAINING, HAS_PIPELINE, HAS_WAIT, EXPOSED_CHARGED, CHUNKS_LEFT = 0, 1, 2, 3, 4
# rows of the per-NPU state
FREE, LOCAL_END, FINISH, NPU_COMPUTE, NPU_EXPOSED, NPU_BUBBLE = 0, 1, 2, 3, 4, 5
# layer tables
LAYER_COMPUTE, LAYER_EXPOSED, LAYER_COMM = 0, 1, 2
# counters
(EH_SIZE, TH_SIZE, TOKEN, SEQ, WAITING, PRIORITY, FINISHED, STATUS, BUSY, CHUNKS,
 RANKS) = range(11)
# timer events
PHASE_DONE, MESSAGE_ARRIVED = 0, 1
# scheduling policies
LIFO, FIFO, HIGHEST = 0, 1, 2
# status bits (0: all is well; otherwise the Python engine reruns the case for its error)
SIZE_MISMATCH = 1
NOT_FINITE = 2
UNFINISHED = 4
UNRECEIVED = 8


# ---------------------------------------------------------------------- heaps
@njit(cache=True, inline="always")
def _op_before(eh_t, eh_i, a, b):
    """Engine heap order: (ready, program, position in the program)."""
    if eh_t[a] != eh_t[b]:
        return eh_t[a] < eh_t[b]
    if eh_i[0, a] != eh_i[0, b]:
        return eh_i[0, a] < eh_i[0, b]
    return eh_i[1, a] < eh_i[1, b]


@njit(cache=True, inline="always")
def _swap_op(eh_t, eh_i, a, b):
    eh_t[a], eh_t[b] = eh_t[b], eh_t[a]
    for r in range(3):
        eh_i[r, a], eh_i[r, b] = eh_i[r, b], eh_i[r, a]


@njit(cache=True, inline="always")
def _push_op(eh_t, eh_i, counters, t, program, order, op):
    n = counters[EH_SIZE]
    eh_t[n] = t
    eh_i[0, n], eh_i[1, n], eh_i[2, n] = program, order, op
    counters[EH_SIZE] = n + 1
    while n > 0:
        parent = (n - 1) >> 1
        if not _op_before(eh_t, eh_i, n, parent):
            break
        _swap_op(eh_t, eh_i, n, parent)
        n = parent


@njit(cache=True, inline="always")
def _pop_op(eh_t, eh_i, counters):
    """Remove the first op; returns (ready, op)."""
    t, op = eh_t[0], eh_i[2, 0]
    n = counters[EH_SIZE] - 1
    counters[EH_SIZE] = n
    if n > 0:
        _swap_op(eh_t, eh_i, 0, n)
        i = 0
        while True:
            left, best = 2 * i + 1, i
            if left < n and _op_before(eh_t, eh_i, left, best):
                best = left
            if left + 1 < n and _op_before(eh_t, eh_i, left + 1, best):
                best = left + 1
            if best == i:
                break
            _swap_op(eh_t, eh_i, i, best)
            i = best
    return t, op


@njit(cache=True, inline="always")
def _push_pair(keys, seqs, vals, base, n, key, seq, val):
    """Push onto the binary heap ``[base, base + n)`` ordered by (key, seq)."""
    i = n
    keys[base + i], seqs[base + i], vals[base + i] = key, seq, val
    while i > 0:
        p = (i - 1) >> 1
        a, b = base + i, base + p
        if keys[a] > keys[b] or (keys[a] == keys[b] and seqs[a] > seqs[b]):
            break
        keys[a], keys[b] = keys[b], keys[a]
        seqs[a], seqs[b] = seqs[b], seqs[a]
        vals[a], vals[b] = vals[b], vals[a]
        i = p


@njit(cache=True, inline="always")
def _pop_pair(keys, seqs, vals, base, n):
    """Pop the (key, seq)-least entry of the heap ``[base, base + n)``; returns its value."""
    out = vals[base]
    n -= 1
    if n > 0:
        keys[base], seqs[base], vals[base] = keys[base + n], seqs[base + n], vals[base + n]
        i = 0
        while True:
            left, best = 2 * i + 1, i
            for c in (left, left + 1):
                if c < n:
                    a, b = base + c, base + best
                    if keys[a] < keys[b] or (keys[a] == keys[b] and seqs[a] < seqs[b]):
                        best = c
            if best == i:
                break
            a, b = base + i, base + best
            keys[a], keys[b] = keys[b], keys[a]
            seqs[a], seqs[b] = seqs[b], seqs[a]
            vals[a], vals[b] = vals[b], vals[a]
            i = best
    return out


# ---------------------------------------------------------------------- ops
@njit(cache=True, inline="always")
def _make_ready(g, si, sf, fs, ist, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, eh_t, eh_i,
                counters):
    """All dependencies of op ``g`` known: when it may start, what it waited for."""
    ctrl = 0.0
    if ctrl_ptr[g + 1] > ctrl_ptr[g]:
        latest = fs[END, ctrl_idx[ctrl_ptr[g]]]
        for j in range(ctrl_ptr[g] + 1, ctrl_ptr[g + 1]):
            v = fs[END, ctrl_idx[j]]
            if v > latest:
                latest = v
        v = latest + sf[GAP, g]
        ctrl = ctrl if ctrl >= v else v
    has_other, other, has_comm, comm = False, 0.0, False, 0.0
    for j in range(dep_ptr[g], dep_ptr[g + 1]):
        d = dep_idx[j]
        v = fs[SEEN, d]
        if si[KIND, d] == COMPUTE:
            if not has_other or v > other:
                other = v
            has_other = True
        else:
            if not has_comm or v > comm:
                comm = v
            has_comm = True
    base = ctrl
    if has_other:
        base = ctrl if ctrl >= other else other
    ready = base
    if has_comm:
        if si[KIND, g] != COMPUTE:   # remember when the receives feeding it arrived
            fed, any_fed = 0.0, False
            for j in range(dep_ptr[g], dep_ptr[g + 1]):
                d = dep_idx[j]
                if si[KIND, d] == RECV:
                    v = fs[SEEN, d]
                elif si[KIND, d] != COMPUTE and ist[HAS_PIPELINE, d]:
                    v = fs[PIPELINE, d]
                else:
                    continue
                if not any_fed or v > fed:
                    fed = v
                any_fed = True
            if any_fed:
                fs[PIPELINE, g] = fed
                ist[HAS_PIPELINE, g] = 1
        ready = base if base >= comm else comm
        if si[KIND, g] == COMPUTE:
            fs[WAIT_BASE, g] = base
            ist[HAS_WAIT, g] = 1
    fs[READY, g] = ready
    _push_op(eh_t, eh_i, counters, ready, si[PROGRAM, g], si[ORDER, g], g)


@njit(cache=True, inline="always")
def _complete(g, end, seen, si, sf, fs, ist, npu_state, prog_npu, dep_ptr, dep_idx,
              ctrl_ptr, ctrl_idx, user_ptr, user_idx, eh_t, eh_i, counters):
    fs[END, g] = end
    fs[SEEN, g] = seen
    counters[FINISHED] += 1
    npu = prog_npu[si[PROGRAM, g]]
    if end > npu_state[FINISH, npu]:
        npu_state[FINISH, npu] = end
    for j in range(user_ptr[g], user_ptr[g + 1]):
        u = user_idx[j]
        ist[REMAINING, u] -= 1
        if ist[REMAINING, u] == 0:
            _make_ready(u, si, sf, fs, ist, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, eh_t, eh_i,
                        counters)


@njit(cache=True, inline="always")
def _exposure(g, free, si, fs, ist, npu_state, layers, npu, weight, dep_ptr, dep_idx):
    """Charge compute op ``g``'s wait for its communication (accounting.exposure)."""
    ist[HAS_WAIT, g] = 0
    base = fs[WAIT_BASE, g]
    latest, binding, first = 0.0, -1, True
    for j in range(dep_ptr[g], dep_ptr[g + 1]):
        d = dep_idx[j]
        if si[KIND, d] != COMPUTE:
            v = fs[SEEN, d]
            if first or v > latest:
                latest, binding = v, d
            first = False
    m = free if free > base else base
    exposed = latest - m
    if 0.0 > exposed:
        exposed = 0.0
    if exposed == 0.0:
        return
    start = latest - exposed
    if si[KIND, binding] == RECV:
        arrived = latest
    elif ist[HAS_PIPELINE, binding]:
        arrived = fs[PIPELINE, binding]
    else:
        arrived = -np.inf
    bubble = arrived - start
    if 0.0 > bubble:
        bubble = 0.0
    if exposed < bubble:
        bubble = exposed
    exposed = exposed - bubble
    npu_state[NPU_BUBBLE, npu] += bubble
    npu_state[NPU_EXPOSED, npu] += exposed
    if exposed:
        layers[LAYER_EXPOSED, si[ROW, binding], si[COL, binding]] += exposed * weight
        ist[EXPOSED_CHARGED, binding] = 1


# ---------------------------------------------------------------------- the loop
@njit(cache=True)
def run_loop(si, sf, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, remaining,
             prog_npu, prog_size, message_dim_bytes, mail_ptr, endpoint_ns,
             shape_chunk_ptr, chunk_phase_ptr, chunk_phases, phase_queue, phase_step_ptr,
             step_delay, step_ns, phase_dim_bytes, queue_ptr, active_chunks,
             n_npus, n_rows, n_cols, n_chunk_instances, n_events):
    """Run every op to completion; see :func:`flowsim.system.analytical_loop.run_fast`
    for the arrays. Returns (status, op float state, op int state, per-NPU state, layer
    tables, dim bytes, busy log (kind, ref, start, end), collectives' latest end)."""
    n_ops = si.shape[1]
    n_dims = phase_dim_bytes.shape[1]
    n_queues = queue_ptr.shape[0] - 1
    fs = np.full((7, n_ops), np.nan)
    ist = np.zeros((5, n_ops), np.int64)
    ist[REMAINING] = remaining
    npu_state = np.zeros((6, n_npus))
    layers = np.zeros((3, n_rows, n_cols))
    dim_bytes = np.zeros(n_dims)
    counters = np.zeros(11, np.int64)
    eh_t = np.empty(n_ops)
    eh_i = np.empty((3, n_ops), np.int64)
    # timer heap: (time, token) -> event kind, reference, start
    th_t = np.empty(n_events)
    th_tok = np.empty(n_events, np.int64)
    th_slot = np.empty(n_events, np.int64)
    ev_kind = np.empty(n_events, np.int64)
    ev_ref = np.empty(n_events, np.int64)
    ev_start = np.empty(n_events)
    # dimension queues: one heap of chunk instances per queue, (key, seq) order
    q_key = np.empty(max(queue_ptr[-1], 1))
    q_seq = np.empty(max(queue_ptr[-1], 1), np.int64)
    q_chunk = np.empty(max(queue_ptr[-1], 1), np.int64)
    q_size = np.zeros(n_queues, np.int64)
    running = np.zeros(n_queues, np.int64)
    changed = np.zeros(n_queues, np.bool_)
    rank = np.full(n_queues, -1, np.int64)
    by_rank = np.empty(n_queues, np.int64)
    # chunk instances: op, chunk, position of its current phase, priority key
    ci_op = np.empty(n_chunk_instances, np.int64)
    ci_chunk = np.empty(n_chunk_instances, np.int64)
    ci_pos = np.zeros(n_chunk_instances, np.int64)
    ci_key = np.empty(n_chunk_instances)
    # mailboxes: per key, arrived messages (send op, arrival) and posted receives
    n_boxes = mail_ptr.shape[0] - 1
    box_op = np.empty(max(mail_ptr[-1], 1), np.int64)
    box_t = np.empty(max(mail_ptr[-1], 1))
    box_head = mail_ptr[:-1].copy()
    box_tail = mail_ptr[:-1].copy()
    recv_op = np.empty(max(mail_ptr[-1], 1), np.int64)
    recv_head = mail_ptr[:-1].copy()
    recv_tail = mail_ptr[:-1].copy()
    busy_kind = np.empty(n_events, np.int64)
    busy_ref = np.empty(n_events, np.int64)
    busy_span = np.empty((2, n_events))

    for g in range(n_ops):
        if remaining[g] == 0:
            _make_ready(g, si, sf, fs, ist, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, eh_t, eh_i,
                        counters)
    now = 0.0
    while True:
        while counters[EH_SIZE] > 0 and eh_t[0] <= now:
            t_ready, g = _pop_op(eh_t, eh_i, counters)
            t = t_ready if t_ready >= now else now
            kind = si[KIND, g]
            p = si[PROGRAM, g]
            npu = prog_npu[p]
            if kind == COMPUTE:
                free = npu_state[FREE, npu]
                if ist[HAS_WAIT, g]:
                    _exposure(g, free, si, fs, ist, npu_state, layers, npu, prog_size[p],
                              dep_ptr, dep_idx)
                ready = fs[READY, g]
                start = ready if ready >= free else free
                duration = sf[DURATION, g]
                end = start + duration
                npu_state[FREE, npu] = end
                if end > npu_state[LOCAL_END, npu]:
                    npu_state[LOCAL_END, npu] = end
                npu_state[NPU_COMPUTE, npu] += duration
                layers[LAYER_COMPUTE, si[ROW, g], si[COL, g]] += duration * prog_size[p]
                _complete(g, end, end, si, sf, fs, ist, npu_state, prog_npu, dep_ptr,
                          dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, eh_t, eh_i,
                          counters)
            elif kind == COLLECTIVE:
                s = si[SHAPE, g]
                if shape_chunk_ptr[s + 1] == shape_chunk_ptr[s]:   # no dimension left
                    layers[LAYER_COMM, si[ROW, g], si[COL, g]] += (t + 0.0 - t) * prog_size[p]
                    _complete(g, t, t + 0.0, si, sf, fs, ist, npu_state, prog_npu, dep_ptr,
                              dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, eh_t, eh_i,
                              counters)
                    continue
                fs[ISSUED, g] = t
                fs[COLL_END, g] = t
                policy = si[POLICY, g]
                if policy == HIGHEST:
                    key = -1e18
                else:
                    key = -float(counters[PRIORITY])
                    counters[PRIORITY] += 1 if policy == LIFO else -1
                ist[CHUNKS_LEFT, g] = shape_chunk_ptr[s + 1] - shape_chunk_ptr[s]
                for c in range(shape_chunk_ptr[s], shape_chunk_ptr[s + 1]):
                    if chunk_phase_ptr[c + 1] > chunk_phase_ptr[c]:
                        ci = counters[CHUNKS]
                        counters[CHUNKS] = ci + 1
                        ci_op[ci], ci_chunk[ci], ci_key[ci] = g, c, key
                        _enqueue(ci, ci_chunk, ci_pos, ci_key, chunk_phase_ptr, chunk_phases,
                                 phase_queue, queue_ptr, q_key, q_seq, q_chunk, q_size,
                                 changed, rank, by_rank, counters)
                    else:   # an empty chunk is done when issued
                        ist[CHUNKS_LEFT, g] -= 1
            elif kind == SEND:
                start = t + endpoint_ns
                _push_event(th_t, th_tok, th_slot, ev_kind, ev_ref, ev_start, counters,
                            start + sf[MESSAGE_NS, g], MESSAGE_ARRIVED, g, start)
                for d in range(n_dims):
                    dim_bytes[d] += message_dim_bytes[g, d]
            else:   # a receive: its message may be there already
                k = si[MAILBOX, g]
                if box_head[k] < box_tail[k]:
                    sender, arrival = box_op[box_head[k]], box_t[box_head[k]]
                    box_head[k] += 1
                    if si[SIZE, g] and si[SIZE, g] != si[SIZE, sender]:
                        counters[STATUS] |= SIZE_MISMATCH
                    ready = fs[READY, g]
                    _complete(g, ready if ready >= arrival else arrival,
                              ready if ready >= arrival else arrival, si, sf, fs, ist,
                              npu_state, prog_npu, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx,
                              user_ptr, user_idx, eh_t, eh_i, counters)
                else:
                    recv_op[recv_tail[k]] = g
                    recv_tail[k] += 1
        _admit(now, active_chunks, ci_chunk, ci_pos, chunk_phase_ptr, chunk_phases,
               phase_step_ptr, step_delay, step_ns, phase_dim_bytes, dim_bytes, queue_ptr,
               q_key, q_seq, q_chunk, q_size, running, changed, by_rank, th_t, th_tok,
               th_slot, ev_kind, ev_ref, ev_start, counters)
        if counters[TH_SIZE] == 0 and counters[EH_SIZE] == 0:
            break
        nxt = np.inf
        if counters[TH_SIZE] > 0:
            nxt = th_t[0]
        if counters[EH_SIZE] > 0 and eh_t[0] < nxt:
            nxt = eh_t[0]
        if not np.isfinite(nxt):
            counters[STATUS] |= NOT_FINITE
            break
        now = nxt
        while counters[TH_SIZE] > 0 and th_t[0] <= now:
            slot = _pop_event(th_t, th_tok, th_slot, counters)
            t = now
            ref, start = ev_ref[slot], ev_start[slot]
            b = counters[BUSY]
            counters[BUSY] = b + 1
            busy_kind[b], busy_span[0, b], busy_span[1, b] = ev_kind[slot], start, t
            if ev_kind[slot] == PHASE_DONE:
                ci = ref
                busy_ref[b] = chunk_phases[chunk_phase_ptr[ci_chunk[ci]] + ci_pos[ci]]
                q = phase_queue[busy_ref[b]]
                running[q] -= 1
                changed[q] = True
                ci_pos[ci] += 1
                c = ci_chunk[ci]
                if chunk_phase_ptr[c] + ci_pos[ci] < chunk_phase_ptr[c + 1]:
                    _enqueue(ci, ci_chunk, ci_pos, ci_key, chunk_phase_ptr, chunk_phases,
                             phase_queue, queue_ptr, q_key, q_seq, q_chunk, q_size, changed,
                             rank, by_rank, counters)
                    continue
                g = ci_op[ci]
                ist[CHUNKS_LEFT, g] -= 1
                if t > fs[COLL_END, g]:
                    fs[COLL_END, g] = t
                if ist[CHUNKS_LEFT, g] == 0:   # the collective is done
                    seen = t + sf[UPDATE_DELAY, g]
                    layers[LAYER_COMM, si[ROW, g], si[COL, g]] += \
                        (seen - fs[ISSUED, g]) * prog_size[si[PROGRAM, g]]
                    _complete(g, t, seen, si, sf, fs, ist, npu_state, prog_npu, dep_ptr,
                              dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, eh_t, eh_i,
                              counters)
            else:   # a message arrived
                g = ref
                busy_ref[b] = g
                end = t + endpoint_ns
                _complete(g, end, end, si, sf, fs, ist, npu_state, prog_npu, dep_ptr,
                          dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, eh_t, eh_i,
                          counters)
                k = si[MAILBOX, g]
                if recv_head[k] < recv_tail[k]:
                    r = recv_op[recv_head[k]]
                    recv_head[k] += 1
                    if si[SIZE, r] and si[SIZE, r] != si[SIZE, g]:
                        counters[STATUS] |= SIZE_MISMATCH
                    ready = fs[READY, r]
                    _complete(r, ready if ready >= end else end,
                              ready if ready >= end else end, si, sf, fs, ist, npu_state,
                              prog_npu, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, user_ptr,
                              user_idx, eh_t, eh_i, counters)
                else:
                    box_op[box_tail[k]], box_t[box_tail[k]] = g, end
                    box_tail[k] += 1
        _admit(now, active_chunks, ci_chunk, ci_pos, chunk_phase_ptr, chunk_phases,
               phase_step_ptr, step_delay, step_ns, phase_dim_bytes, dim_bytes, queue_ptr,
               q_key, q_seq, q_chunk, q_size, running, changed, by_rank, th_t, th_tok,
               th_slot, ev_kind, ev_ref, ev_start, counters)
    if counters[FINISHED] < n_ops:
        counters[STATUS] |= UNFINISHED
    for k in range(n_boxes):
        if box_head[k] < box_tail[k]:
            counters[STATUS] |= UNRECEIVED
    coll_end = 0.0
    for g in range(n_ops):
        if si[KIND, g] == COLLECTIVE and not np.isnan(fs[ISSUED, g]) \
                and fs[COLL_END, g] > coll_end:
            coll_end = fs[COLL_END, g]
    n_busy = counters[BUSY]
    return (counters[STATUS], fs, ist, npu_state, layers, dim_bytes, busy_kind[:n_busy],
            busy_ref[:n_busy], busy_span[:, :n_busy], coll_end)


@njit(cache=True, inline="always")
def _push_event(th_t, th_tok, th_slot, ev_kind, ev_ref, ev_start, counters, t, kind, ref,
                start):
    """A timer token due at ``t`` (tokens count up: equal times run in request order)."""
    token = counters[TOKEN]
    counters[TOKEN] = token + 1
    slot = token   # one event per token: the token is its slot
    ev_kind[slot], ev_ref[slot], ev_start[slot] = kind, ref, start
    _push_pair(th_t, th_tok, th_slot, 0, counters[TH_SIZE], t, token, slot)
    counters[TH_SIZE] += 1


@njit(cache=True, inline="always")
def _pop_event(th_t, th_tok, th_slot, counters):
    slot = _pop_pair(th_t, th_tok, th_slot, 0, counters[TH_SIZE])
    counters[TH_SIZE] -= 1
    return slot


@njit(cache=True, inline="always")
def _enqueue(ci, ci_chunk, ci_pos, ci_key, chunk_phase_ptr, chunk_phases, phase_queue,
             queue_ptr, q_key, q_seq, q_chunk, q_size, changed, rank, by_rank, counters):
    """Chunk instance ``ci`` waits in the queue of its current phase."""
    q = phase_queue[chunk_phases[chunk_phase_ptr[ci_chunk[ci]] + ci_pos[ci]]]
    if rank[q] < 0:
        rank[q] = counters[RANKS]
        by_rank[counters[RANKS]] = q
        counters[RANKS] += 1
    seq = counters[SEQ]
    counters[SEQ] = seq + 1
    _push_pair(q_key, q_seq, q_chunk, queue_ptr[q], q_size[q], ci_key[ci], seq, ci)
    q_size[q] += 1
    changed[q] = True
    counters[WAITING] += 1


@njit(cache=True, inline="always")
def _admit(now, active_chunks, ci_chunk, ci_pos, chunk_phase_ptr, chunk_phases,
           phase_step_ptr, step_delay, step_ns, phase_dim_bytes, dim_bytes, queue_ptr, q_key,
           q_seq, q_chunk, q_size, running, changed, by_rank, th_t, th_tok, th_slot, ev_kind,
           ev_ref, ev_start, counters):
    """Start waiting chunks of the queues that changed, oldest queue first, while each
    runs fewer than ``active_chunks``; a phase's end is known when it starts."""
    if counters[WAITING] > 0:
        for r in range(counters[RANKS]):
            q = by_rank[r]
            if not changed[q]:
                continue
            while q_size[q] > 0 and running[q] < active_chunks:
                ci = _pop_pair(q_key, q_seq, q_chunk, queue_ptr[q], q_size[q])
                q_size[q] -= 1
                counters[WAITING] -= 1
                running[q] += 1
                ph = chunk_phases[chunk_phase_ptr[ci_chunk[ci]] + ci_pos[ci]]
                end = now
                first, last = phase_step_ptr[ph], phase_step_ptr[ph + 1]
                for j in range(first, last):
                    end = end + step_delay[j + ph] + step_ns[j]
                end = end + step_delay[last + ph]
                _push_event(th_t, th_tok, th_slot, ev_kind, ev_ref, ev_start, counters, end,
                            PHASE_DONE, ci, now)
                for d in range(dim_bytes.shape[0]):
                    dim_bytes[d] += phase_dim_bytes[ph, d]
    changed[:] = False
