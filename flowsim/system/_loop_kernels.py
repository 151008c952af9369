"""The analytical model's training loop, compiled (plain arrays in; :mod:`.loop_arrays`
packs them, :mod:`.analytical_loop` decides which runs come here).

:func:`run_loop` does what the :class:`~.workload_engine.WorkloadEngine`, its
:class:`~.scheduler.Schedule` and the :class:`~.analytical_timer.AnalyticalTimer` do, with the
same float operations in the same order: the same bits (``tests/test_analytical_loop.py``).
It is one function body with work lists instead of calls, which cost Numba two atomic
reference counts per array argument (half the loop's time with helper functions).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._loop_parts import pop_op, pop_pair, push_op, push_pair, workspace

# the codes in one block, not one per line
# isort: off
from .loop_codes import (
    COMPUTE, COLLECTIVE, SEND, RECV, DURATION, GAP, UPDATE_DELAY, MESSAGE_NS, KIND, PROGRAM,
    ORDER, ROW, COL, SHAPE, POLICY, MAILBOX, SIZE, END, SEEN, READY, PIPELINE, WAIT_BASE,
    REMAINING, HAS_PIPELINE, HAS_WAIT, EXPOSED_CHARGED, FREE, LOCAL_END, FINISH, NPU_COMPUTE,
    NPU_EXPOSED, NPU_BUBBLE, LAYER_COMPUTE, LAYER_EXPOSED, LAYER_COMM, PHASE_DONE,
    MESSAGE_ARRIVED, LIFO, HIGHEST, STARTING, EVENTS, ADMITTING, SIZE_MISMATCH, NOT_FINITE,
    UNFINISHED, UNRECEIVED)
# isort: on


@njit(cache=True)
def run_loop(si, sf, dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, user_ptr, user_idx, remaining,
             prog_npu, prog_size, message_dim_bytes, mail_ptr, endpoint_ns,
             shape_chunk_ptr, chunk_phase_ptr, chunk_phases, phase_queue, phase_step_ptr,
             step_delay, step_ns, phase_dim_bytes, queue_ptr, active_chunks,
             inst_of, inst_ptr, inst_comm, inst_shape, inst_policy, comm_ptr, comm_ordered,
             n_npus, n_rows, n_cols, n_chunk_instances, n_events):
    """Run every op to completion (the arrays: :func:`flowsim.system.loop_arrays.pack`).
    Collectives of one-NPU programs meet first: ``inst_of`` names the instance an op joins
    (-1: a program's own collective), issued once its members are in, in its communicator's
    order where that is ordered. Returns the status bits, the op float and int states, the
    per-NPU state, the layer tables, bytes per dimension, the busy spans (kind, phase or op,
    start and end) and the latest end of any collective."""
    n_ops = si.shape[0]
    n_dims = phase_dim_bytes.shape[1]
    n_queues = queue_ptr.shape[0] - 1
    n_issues = n_ops + inst_comm.shape[0]   # issued collectives: ops, then meetings
    (fs, ist, npu_state, layers, dim_bytes, eh_t, eh_i, th_t, th_tok, th_slot, ev_kind, ev_ref,
     ev_start, q_key, q_seq, q_chunk, q_size, running, changed, rank, by_rank, iss_t, iss_end,
     iss_left, members, joined, issues, ci_op, ci_chunk, ci_pos, ci_key, box_op, box_t,
     recv_op, busy_kind, busy_ref, busy_span, fin_id, fin_t, done_g, done_t, meet, meet_t,
     ready_ops, to_queue) = workspace(n_ops, n_npus, n_rows, n_cols, n_dims, n_events,
                                      n_queues, max(queue_ptr[-1], 1), max(mail_ptr[-1], 1),
                                      n_chunk_instances, n_issues, inst_ptr)
    ist[:, REMAINING] = remaining
    box_head, box_tail = mail_ptr[:-1].copy(), mail_ptr[:-1].copy()
    recv_head, recv_tail = mail_ptr[:-1].copy(), mail_ptr[:-1].copy()
    comm_next = comm_ptr[:-1].copy()
    status = eh_n = th_n = tokens = n_ranks = seq = waiting = priority = n_ci = n_busy = 0
    n_fin = n_done = n_ready = n_to_queue = n_meet = finished = 0
    for g in range(n_ops):
        if remaining[g] == 0:
            ready_ops[n_ready] = g
            n_ready += 1

    now = 0.0
    stage, then = STARTING, EVENTS
    while True:
        # ---- work lists first: what the engine does inside the call that caused it
        while n_meet > 0:   # a receive meets its message: done when both are there
            n_meet -= 1
            r, sender = meet[n_meet, 0], meet[n_meet, 1]
            if si[r, SIZE] and si[r, SIZE] != si[sender, SIZE]:
                status |= SIZE_MISMATCH
            ready, arrival = fs[r, READY], meet_t[n_meet]
            end = ready if ready >= arrival else arrival
            done_g[n_done], done_t[n_done, 0], done_t[n_done, 1] = r, end, end
            n_done += 1
        for f in range(n_fin):   # collectives done, in order: so are their members
            iid, end = fin_id[f], fin_t[f, 0]
            first, last = (iid, iid + 1) if iid < n_ops else \
                (inst_ptr[iid - n_ops], inst_ptr[iid - n_ops + 1])
            for j in range(first, last):
                g = iid if iid < n_ops else members[j]
                seen = end + (sf[g, UPDATE_DELAY] if fin_t[f, 1] else 0.0)
                layers[LAYER_COMM, si[g, ROW], si[g, COL]] += \
                    (seen - iss_t[iid]) * prog_size[si[g, PROGRAM]]
                done_g[n_done], done_t[n_done, 0], done_t[n_done, 1] = g, end, seen
                n_done += 1
        n_fin = 0
        while n_done > 0:   # an op completes: its users may become ready
            n_done -= 1
            g = done_g[n_done]
            end = done_t[n_done, 0]
            fs[g, END] = end
            fs[g, SEEN] = done_t[n_done, 1]
            finished += 1
            npu = prog_npu[si[g, PROGRAM]]
            if end > npu_state[npu, FINISH]:
                npu_state[npu, FINISH] = end
            for j in range(user_ptr[g], user_ptr[g + 1]):
                u = user_idx[j]
                ist[u, REMAINING] -= 1
                if ist[u, REMAINING] == 0:
                    ready_ops[n_ready] = u
                    n_ready += 1
        while n_ready > 0:   # when a ready op may start, and what it waited for
            n_ready -= 1
            g = ready_ops[n_ready]
            ctrl = 0.0
            if ctrl_ptr[g + 1] > ctrl_ptr[g]:
                latest = fs[ctrl_idx[ctrl_ptr[g]], END]
                for j in range(ctrl_ptr[g] + 1, ctrl_ptr[g + 1]):
                    if fs[ctrl_idx[j], END] > latest:
                        latest = fs[ctrl_idx[j], END]
                v = latest + sf[g, GAP]
                ctrl = ctrl if ctrl >= v else v
            has_other, other, has_comm, comm = False, 0.0, False, 0.0
            fed, any_fed = 0.0, False   # when the receives feeding it arrived
            for j in range(dep_ptr[g], dep_ptr[g + 1]):
                d = dep_idx[j]
                v = fs[d, SEEN]
                if si[d, KIND] == COMPUTE:
                    if not has_other or v > other:
                        other = v
                    has_other = True
                    continue
                if not has_comm or v > comm:
                    comm = v
                has_comm = True
                if si[d, KIND] != RECV:
                    if not ist[d, HAS_PIPELINE]:
                        continue
                    v = fs[d, PIPELINE]
                if not any_fed or v > fed:
                    fed = v
                any_fed = True
            base = ctrl
            if has_other:
                base = ctrl if ctrl >= other else other
            ready = base
            if has_comm:
                if si[g, KIND] != COMPUTE and any_fed:
                    fs[g, PIPELINE] = fed
                    ist[g, HAS_PIPELINE] = 1
                ready = base if base >= comm else comm
                if si[g, KIND] == COMPUTE:
                    fs[g, WAIT_BASE] = base
                    ist[g, HAS_WAIT] = 1
            fs[g, READY] = ready
            push_op(eh_t, eh_i, eh_n, ready, si[g, PROGRAM], si[g, ORDER], g)
            eh_n += 1
        for e in range(n_to_queue):   # a chunk waits in the queue of its next phase
            ci = to_queue[e]
            q = phase_queue[chunk_phases[chunk_phase_ptr[ci_chunk[ci]] + ci_pos[ci]]]
            if rank[q] < 0:
                rank[q] = n_ranks
                by_rank[n_ranks] = q
                n_ranks += 1
            push_pair(q_key, q_seq, q_chunk, queue_ptr[q], q_size[q], ci_key[ci], seq, ci)
            seq += 1
            q_size[q] += 1
            changed[q] = True
            waiting += 1
        n_to_queue = 0

        if stage == STARTING:
            # ---- the next op due: compute, issue a collective, send or receive
            if eh_n == 0 or eh_t[0] > now:
                stage, then = ADMITTING, EVENTS
                continue
            t_ready, g = pop_op(eh_t, eh_i, eh_n)
            eh_n -= 1
            t = t_ready if t_ready >= now else now
            kind = si[g, KIND]
            p = si[g, PROGRAM]
            npu = prog_npu[p]
            if kind == COMPUTE:
                free = npu_state[npu, FREE]
                if ist[g, HAS_WAIT]:   # charge the wait for communication (accounting)
                    ist[g, HAS_WAIT] = 0
                    latest, binding, first = 0.0, -1, True
                    for j in range(dep_ptr[g], dep_ptr[g + 1]):
                        d = dep_idx[j]
                        if si[d, KIND] != COMPUTE and (first or fs[d, SEEN] > latest):
                            latest, binding = fs[d, SEEN], d
                            first = False
                    base = fs[g, WAIT_BASE]
                    exposed = latest - (free if free > base else base)
                    if 0.0 > exposed:
                        exposed = 0.0
                    if exposed != 0.0:
                        arrived = -np.inf
                        if si[binding, KIND] == RECV:
                            arrived = latest
                        elif ist[binding, HAS_PIPELINE]:
                            arrived = fs[binding, PIPELINE]
                        bubble = arrived - (latest - exposed)
                        if 0.0 > bubble:
                            bubble = 0.0
                        if exposed < bubble:
                            bubble = exposed
                        exposed = exposed - bubble
                        npu_state[npu, NPU_BUBBLE] += bubble
                        npu_state[npu, NPU_EXPOSED] += exposed
                        if exposed:
                            layers[LAYER_EXPOSED, si[binding, ROW], si[binding, COL]] += \
                                exposed * prog_size[p]
                            ist[binding, EXPOSED_CHARGED] = 1
                ready = fs[g, READY]
                start = ready if ready >= free else free
                duration = sf[g, DURATION]
                end = start + duration
                npu_state[npu, FREE] = end
                if end > npu_state[npu, LOCAL_END]:
                    npu_state[npu, LOCAL_END] = end
                npu_state[npu, NPU_COMPUTE] += duration
                layers[LAYER_COMPUTE, si[g, ROW], si[g, COL]] += duration * prog_size[p]
                done_g[n_done], done_t[n_done, 0], done_t[n_done, 1] = g, end, end
                n_done += 1
            elif kind == COLLECTIVE:
                n_issue = 0
                i = inst_of[g]
                if i < 0:
                    issues[0], n_issue = g, 1
                else:   # one rank reaches a meeting: issue what is complete, in order
                    members[inst_ptr[i] + joined[i]] = g
                    joined[i] += 1
                    c = inst_comm[i]
                    if joined[i] == inst_ptr[i + 1] - inst_ptr[i] and not comm_ordered[c]:
                        issues[0], n_issue = n_ops + i, 1
                    elif joined[i] == inst_ptr[i + 1] - inst_ptr[i]:
                        while comm_next[c] < comm_ptr[c + 1] and joined[comm_next[c]] == \
                                inst_ptr[comm_next[c] + 1] - inst_ptr[comm_next[c]]:
                            issues[n_issue] = n_ops + comm_next[c]
                            n_issue += 1
                            comm_next[c] += 1
                for e in range(n_issue):
                    iid = issues[e]
                    s = si[iid, SHAPE] if iid < n_ops else inst_shape[iid - n_ops]
                    iss_t[iid] = t
                    if shape_chunk_ptr[s + 1] == shape_chunk_ptr[s]:   # no dimension left
                        fin_id[n_fin], fin_t[n_fin, 0], fin_t[n_fin, 1] = iid, t, 0.0
                        n_fin += 1
                        continue
                    iss_end[iid] = t
                    policy = si[iid, POLICY] if iid < n_ops else inst_policy[iid - n_ops]
                    key = -1e18
                    if policy != HIGHEST:
                        key = -float(priority)
                        priority += 1 if policy == LIFO else -1
                    iss_left[iid] = shape_chunk_ptr[s + 1] - shape_chunk_ptr[s]
                    for c in range(shape_chunk_ptr[s], shape_chunk_ptr[s + 1]):
                        if chunk_phase_ptr[c + 1] == chunk_phase_ptr[c]:
                            iss_left[iid] -= 1   # an empty chunk is done when issued
                            continue
                        ci_op[n_ci], ci_chunk[n_ci], ci_key[n_ci] = iid, c, key
                        to_queue[n_to_queue] = n_ci
                        n_to_queue += 1
                        n_ci += 1
            elif kind == SEND:
                start = t + endpoint_ns
                ev_kind[tokens], ev_ref[tokens], ev_start[tokens] = MESSAGE_ARRIVED, g, start
                push_pair(th_t, th_tok, th_slot, 0, th_n, start + sf[g, MESSAGE_NS], tokens,
                          tokens)
                th_n += 1
                tokens += 1
                for d in range(n_dims):
                    dim_bytes[d] += message_dim_bytes[g, d]
            else:   # a receive: its message may be there already
                k = si[g, MAILBOX]
                if box_head[k] < box_tail[k]:
                    meet[n_meet, 0], meet[n_meet, 1] = g, box_op[box_head[k]]
                    meet_t[n_meet] = box_t[box_head[k]]
                    n_meet += 1
                    box_head[k] += 1
                else:
                    recv_op[recv_tail[k]] = g
                    recv_tail[k] += 1
            continue

        if stage == EVENTS:
            # ---- the timer's next event due: a phase or a message ends
            if th_n == 0 or th_t[0] > now:
                stage, then = ADMITTING, STARTING
                continue
            slot = pop_pair(th_t, th_tok, th_slot, 0, th_n)
            th_n -= 1
            t = now
            busy_kind[n_busy], busy_span[0, n_busy], busy_span[1, n_busy] = \
                ev_kind[slot], ev_start[slot], t
            if ev_kind[slot] == PHASE_DONE:
                ci = ev_ref[slot]
                c = ci_chunk[ci]
                busy_ref[n_busy] = chunk_phases[chunk_phase_ptr[c] + ci_pos[ci]]
                n_busy += 1
                q = phase_queue[busy_ref[n_busy - 1]]
                running[q] -= 1
                changed[q] = True
                ci_pos[ci] += 1
                if chunk_phase_ptr[c] + ci_pos[ci] < chunk_phase_ptr[c + 1]:
                    to_queue[n_to_queue] = ci
                    n_to_queue += 1
                    continue
                iid = ci_op[ci]
                iss_left[iid] -= 1
                if t > iss_end[iid]:
                    iss_end[iid] = t
                if iss_left[iid] == 0:   # the collective is done
                    fin_id[n_fin], fin_t[n_fin, 0], fin_t[n_fin, 1] = iid, t, 1.0
                    n_fin += 1
                continue
            g = ev_ref[slot]   # a message arrived: the send is done, a receive may be
            busy_ref[n_busy] = g
            n_busy += 1
            end = t + endpoint_ns
            done_g[n_done], done_t[n_done, 0], done_t[n_done, 1] = g, end, end
            n_done += 1
            k = si[g, MAILBOX]
            if recv_head[k] < recv_tail[k]:
                meet[n_meet, 0], meet[n_meet, 1], meet_t[n_meet] = recv_op[recv_head[k]], g, end
                n_meet += 1
                recv_head[k] += 1
            else:
                box_op[box_tail[k]], box_t[box_tail[k]] = g, end
                box_tail[k] += 1
            continue

        # ---- admission: the queues that changed, oldest first, while one runs fewer than
        # active_chunks; a phase's end is known when it starts
        if waiting > 0:
            for r in range(n_ranks):
                q = by_rank[r]
                if not changed[q]:
                    continue
                while q_size[q] > 0 and running[q] < active_chunks:
                    ci = pop_pair(q_key, q_seq, q_chunk, queue_ptr[q], q_size[q])
                    q_size[q] -= 1
                    waiting -= 1
                    running[q] += 1
                    ph = chunk_phases[chunk_phase_ptr[ci_chunk[ci]] + ci_pos[ci]]
                    end = now
                    first, last = phase_step_ptr[ph], phase_step_ptr[ph + 1]
                    for j in range(first, last):
                        end = end + step_delay[j + ph] + step_ns[j]
                    end = end + step_delay[last + ph]
                    ev_kind[tokens], ev_ref[tokens], ev_start[tokens] = PHASE_DONE, ci, now
                    push_pair(th_t, th_tok, th_slot, 0, th_n, end, tokens, tokens)
                    th_n += 1
                    tokens += 1
                    for d in range(n_dims):
                        dim_bytes[d] += phase_dim_bytes[ph, d]
        changed[:] = False
        if then == STARTING:
            stage = STARTING
            continue
        if th_n == 0 and eh_n == 0:
            break
        nxt = th_t[0] if th_n > 0 else np.inf
        if eh_n > 0 and eh_t[0] < nxt:
            nxt = eh_t[0]
        if not np.isfinite(nxt):
            status |= NOT_FINITE
            break
        now = nxt
        stage = EVENTS

    if finished < n_ops:
        status |= UNFINISHED
    for k in range(mail_ptr.shape[0] - 1):
        if box_head[k] < box_tail[k]:
            status |= UNRECEIVED
    coll_end = 0.0
    for iid in range(n_issues):
        if not np.isnan(iss_end[iid]) and iss_end[iid] > coll_end:
            coll_end = iss_end[iid]
    return (status, fs, ist, npu_state, layers, dim_bytes, busy_kind[:n_busy],
            busy_ref[:n_busy], busy_span[:, :n_busy], coll_end)
