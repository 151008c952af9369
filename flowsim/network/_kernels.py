"""Numba kernels of the network layer: the event loop that advances flows (its max-min solver
and heap are in :mod:`._maxmin_kernels`). Plain contiguous arrays in, status codes out.

Dtypes: float64 for bytes, rates, capacities and times; int64 for CSR pointers and flow ids;
int32 for link ids. Nothing here validates: the Python wrappers in ``maxmin.py`` and
``engine.py`` do, and they own every buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._maxmin_kernels import heap_pop, heap_push, maxmin_active

# status codes returned by run_events
STATUS_DONE = 0
STATUS_STOPPED = 1      # a watched group completed; the caller may add flows and resume
STATUS_DEADLOCK = 2     # flows wait on dependencies that can never complete
STATUS_STALLED = 3      # active flows have zero rate (zero capacity somewhere)
STATUS_HORIZON = 4      # the next event lies beyond ``until``; the clock stands at ``until``

MODEL_ANALYTICAL = 0
MODEL_FLOW = 1

# flow states
WAITING, SCHEDULED, SENDING, IN_FLIGHT, DONE = 0, 1, 2, 3, 4

#: Relative and absolute time tolerance for events that tie (ns).
TIME_RTOL = 1e-12
TIME_ATOL = 1e-9


# ---------------------------------------------------------------- dependency lists
@njit(cache=True)
def append_edges(dep_head, edge_next, edge_succ, first_edge, preds, succs):
    """Append edges ``preds[i] -> succs[i]`` to per-flow linked lists of dependants."""
    for i in range(preds.size):
        e = first_edge + i
        edge_succ[e] = succs[i]
        edge_next[e] = dep_head[preds[i]]
        dep_head[preds[i]] = e


# ---------------------------------------------------------------- the event loop
@njit(cache=True)
def run_events(model, capacity, indptr, links, mult,
               nbytes, latency, release, delay, bottleneck, group,
               pending, ready, dep_head, edge_next, edge_succ,
               state, start_time, send_end, finish, remaining, rate, time_to_go,
               group_pending, group_done, group_watch,
               active, active_pos, link_count, active_links, link_pos, link_busy,
               sched_keys, sched_ids, sched_tags, arr_keys, arr_ids, arr_tags,
               ws_cap, ws_unfrozen, ws_start, ws_fill, ws_flows, ws_touched, ws_frozen,
               ws_hkeys, ws_hids, ws_htags,
               counters, clock, first_new, n_flows, until):
    """Advance flows from event to event until all are done, a watched group completes, or
    the next event lies beyond ``until`` (then flows are advanced to ``until``).

    Flow ``f`` starts ``delay[f]`` after the later of ``release[f]`` and the arrival of its last
    dependency, sends ``nbytes[f]`` at its current rate (max-min fair share under
    ``MODEL_FLOW``, its path's bottleneck alone under ``MODEL_ANALYTICAL``), and arrives
    ``latency[f]`` after its last byte left; ``mult[f]`` copies of it share the links
    (:func:`maxmin_active`). ``counters`` holds (scheduled-heap size,
    arrival-heap size, active flows, active links, done flows, rates-dirty flag, events,
    rate computations); ``clock[0]`` is the current time. Flows ``first_new..n_flows-1`` were
    added since the last call. Returns a status code.
    """
    n_sched = counters[0]
    n_arr = counters[1]
    n_act = counters[2]
    n_links_active = counters[3]
    n_done = counters[4]
    dirty = counters[5]
    now = clock[0]
    stop = False
    # the max-min solver's link -> flows lists, reused while no flow has started since they
    # were built and the flows still sending hold at least half their incidences (the
    # lists live in the workspaces, which the caller may reallocate between calls)
    lists_valid = False
    lists_incidences = 0
    live_incidences = 0
    for i in range(n_act):
        f = active[i]
        live_incidences += indptr[f + 1] - indptr[f]
    # flows added since the last call whose dependencies are already met
    for f in range(first_new, n_flows):
        if state[f] == WAITING and pending[f] == 0:
            t = max(ready[f], release[f]) + delay[f]
            state[f] = SCHEDULED
            n_sched = heap_push(sched_keys, sched_ids, sched_tags, n_sched, t, f, 0)
    status = STATUS_DONE
    while True:
        # ---- process everything due now: arrivals release dependants, starts activate
        progressed = True
        while progressed:
            progressed = False
            tol = TIME_RTOL * abs(now) + TIME_ATOL
            while n_arr > 0 and arr_keys[0] <= now + tol:
                t = arr_keys[0]
                f = arr_ids[0]
                n_arr = heap_pop(arr_keys, arr_ids, arr_tags, n_arr)
                progressed = True
                state[f] = DONE
                finish[f] = t
                n_done += 1
                g = group[f]
                if g >= 0:
                    group_pending[g] -= 1
                    if group_pending[g] == 0:
                        group_done[g] = t
                        if group_watch[g]:
                            stop = True
                k = dep_head[f]
                while k >= 0:
                    h = edge_succ[k]
                    k = edge_next[k]
                    pending[h] -= 1
                    if t > ready[h]:
                        ready[h] = t
                    if pending[h] == 0 and state[h] == WAITING:
                        ts = max(ready[h], release[h]) + delay[h]
                        state[h] = SCHEDULED
                        n_sched = heap_push(sched_keys, sched_ids, sched_tags, n_sched, ts, h, 0)
            while n_sched > 0 and sched_keys[0] <= now + tol:
                t = sched_keys[0]
                f = sched_ids[0]
                n_sched = heap_pop(sched_keys, sched_ids, sched_tags, n_sched)
                progressed = True
                start_time[f] = t
                if nbytes[f] <= 0.0 or indptr[f] == indptr[f + 1]:
                    state[f] = IN_FLIGHT
                    send_end[f] = t
                    remaining[f] = 0.0
                    n_arr = heap_push(arr_keys, arr_ids, arr_tags, n_arr, t + latency[f], f, 0)
                else:
                    state[f] = SENDING
                    remaining[f] = nbytes[f]
                    active_pos[f] = n_act
                    active[n_act] = f
                    n_act += 1
                    rate[f] = bottleneck[f]
                    dirty = 1
                    lists_valid = False
                    live_incidences += indptr[f + 1] - indptr[f]
                    for e in range(indptr[f], indptr[f + 1]):
                        link = links[e]
                        if link_count[link] == 0:
                            link_pos[link] = n_links_active
                            active_links[n_links_active] = link
                            n_links_active += 1
                        link_count[link] += 1
        if stop:
            status = STATUS_STOPPED
            break
        # ---- rates
        if dirty and model == MODEL_FLOW and n_act > 0:
            # with copies the lists' order would change rounding: rebuilt every time
            reuse = mult.size == 0 and lists_valid and 2 * live_incidences >= lists_incidences
            n_counted = -1
            if mult.size == 0:      # the active flows per link are counted already
                for i in range(n_links_active):
                    link = active_links[i]
                    ws_unfrozen[link] = link_count[link]
                    ws_touched[i] = link
                n_counted = n_links_active
            maxmin_active(capacity, indptr, links, mult, active, n_act, rate,
                          ws_cap, ws_unfrozen, ws_start, ws_fill, ws_flows, ws_touched,
                          ws_frozen, ws_hkeys, ws_hids, ws_htags, reuse, n_counted)
            if not reuse:
                lists_valid = True
                lists_incidences = live_incidences
            counters[7] += 1
        dirty = 0
        # ---- next event
        t_next = np.inf
        for i in range(n_act):
            f = active[i]
            if rate[f] > 0.0:
                tf = now + remaining[f] / rate[f]
            else:
                tf = np.inf
            time_to_go[f] = tf
            if tf < t_next:
                t_next = tf
        if n_sched > 0 and sched_keys[0] < t_next:
            t_next = sched_keys[0]
        if n_arr > 0 and arr_keys[0] < t_next:
            t_next = arr_keys[0]
        if t_next > until:
            dt = until - now
            if dt > 0.0:
                for i in range(n_links_active):
                    link_busy[active_links[i]] += dt
                for i in range(n_act):
                    f = active[i]
                    remaining[f] -= rate[f] * dt
                now = until
            status = STATUS_HORIZON
            break
        if t_next == np.inf:
            if n_act > 0:
                status = STATUS_STALLED
            elif n_done < n_flows:
                status = STATUS_DEADLOCK
            else:
                status = STATUS_DONE
            break
        counters[6] += 1
        dt = t_next - now
        for i in range(n_links_active):
            link_busy[active_links[i]] += dt
        now = t_next
        tol = TIME_RTOL * abs(now) + TIME_ATOL
        # ---- advance sending flows; retire those whose last byte leaves now (ties batched)
        i = 0
        while i < n_act:
            f = active[i]
            if time_to_go[f] <= now + tol:
                state[f] = IN_FLIGHT
                send_end[f] = now
                remaining[f] = 0.0
                n_arr = heap_push(arr_keys, arr_ids, arr_tags, n_arr, now + latency[f], f, 0)
                last = active[n_act - 1]
                active[i] = last
                active_pos[last] = i
                n_act -= 1
                dirty = 1
                live_incidences -= indptr[f + 1] - indptr[f]
                for e in range(indptr[f], indptr[f + 1]):
                    link = links[e]
                    link_count[link] -= 1
                    if link_count[link] == 0:
                        p = link_pos[link]
                        moved = active_links[n_links_active - 1]
                        active_links[p] = moved
                        link_pos[moved] = p
                        n_links_active -= 1
                # do not advance i: a new flow sits at position i
            else:
                remaining[f] -= rate[f] * dt
                i += 1
    counters[0] = n_sched
    counters[1] = n_arr
    counters[2] = n_act
    counters[3] = n_links_active
    counters[4] = n_done
    counters[5] = dirty
    clock[0] = now
    return status
