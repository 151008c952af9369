"""Numba kernels of the system layer (plain arrays in; the Python wrappers validate).

:func:`batched_collective_times` is the batched analytical estimator
(:func:`flowsim.estimate_batch`): per grid point, the cost model prices each chunk's phases
and the chunks go through ASTRA-sim's dimension queues. Its slow, readable twin is
:func:`flowsim.testing.estimate_batch_reference`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: status bits of :func:`check_ranges` and :func:`batched_collective_times` (0: all is well)
BAD_SIZE = 1        # a size outside 1 .. size_max
BAD_LINK = 2        # a bandwidth outside bw_min .. bw_max or a latency outside 0 .. lat_max
BAD_CHUNKS = 4      # a size below the chunk count that the first point fixes
NOT_FINITE = 8      # a phase whose time is not finite


@njit(cache=True)
def check_ranges(sizes, gbps, latency, size_max, bw_min, bw_max, lat_max):
    """The status bits of the inputs' ranges (NaN is out of every range)."""
    status = 0
    for i in range(sizes.shape[0]):
        if not (sizes[i] >= 1 and sizes[i] <= size_max):
            status |= BAD_SIZE
    for i in range(gbps.shape[0]):
        for d in range(gbps.shape[1]):
            if not (gbps[i, d] >= bw_min and gbps[i, d] <= bw_max):
                status |= BAD_LINK
    for i in range(latency.shape[0]):
        for d in range(latency.shape[1]):
            if not (latency[i, d] >= 0.0 and latency[i, d] <= lat_max):
                status |= BAD_LINK
    return status


@njit(cache=True)
def _phase_ns(chunk, data_factor, passes, g0, g1, group_fraction, group_reduce_fraction,
              group_count, pair_ptr, pair_dim, pair_hops, lat, per_byte, endpoint_ns,
              mem_bw_gbps, reduction_delay_ns):
    """One phase of a chunk of ``chunk`` bytes: the rules of :mod:`flowsim.system.cost`
    (``message_ns``, ``reduction_ns``, ``phase_ns_grouped``) on scalars, operation for
    operation, so that the result is the cost model's to the bit."""
    data = chunk * data_factor
    total = endpoint_ns
    for g in range(g0, g1):
        nbytes = group_fraction[g] * data
        slowest = 0.0   # a step without messages takes no time (cost.step_ns)
        for k in range(pair_ptr[g], pair_ptr[g + 1]):
            d = pair_dim[k]
            t = pair_hops[k] * lat[d] + nbytes * per_byte[d]
            slowest = t if k == pair_ptr[g] else max(slowest, t)
        received = group_reduce_fraction[g] * data
        reduction = 0.0
        if received > 0:
            reduction = reduction_delay_ns
            if mem_bw_gbps >= 0:
                reduction = reduction + 3.0 * np.floor(received / mem_bw_gbps)
        post = passes * endpoint_ns + reduction
        count = group_count[g]
        if count != 1:
            total = total + (slowest + post) * count
        else:
            total = total + slowest + post
    return total


@njit(cache=True)
def _queues_in_order(small, large, extra, phase_queue, n_phases, n_chunks, end, queue_free):
    """Finish time of phases ``0 .. n_phases - 1`` of the chunks (their ends in ``end``) when
    each queue runs one phase at a time and serves them phase after phase, each for every
    chunk in chunk order: so it does when a queue serves one phase, or phase 0 and one later
    phase (phase 0's chunks, all queued at time 0, go first). A phase starts when the chunk's
    previous phase and the queue's previous phase have both ended."""
    queue_free[:] = 0.0
    end[:] = 0.0
    for i in range(n_phases):
        free = queue_free[phase_queue[i]]
        for c in range(n_chunks):
            free = max(end[c], free) + (large[i] if c < extra else small[i])
            end[c] = free
        queue_free[phase_queue[i]] = free
    finish = 0.0
    for c in range(n_chunks):
        finish = max(finish, end[c])
    return finish


@njit(cache=True)
def _queues_one_in_flight(small, large, extra, phase_queue, shared, first_shared, n_chunks,
                          phase_of, end, queue_free, last_arrival):
    """Finish time of the chunks through dimension queues that run one phase at a time, when
    some queues (``shared[i]``) serve two phases after phase 0, the first ``first_shared``;
    -1.0 if two chunks join such a queue at the same time (then :func:`_queues_simulated`
    decides their order).

    A queue serves chunks in the order they join it, and so each phase's chunks in chunk
    order. Up to the first shared phase, that is :func:`_queues_in_order`. From there the
    chunks' arrivals at shared queues are taken in time order, as events; after one, the
    chunk's next phases that are not shared follow at once.
    """
    n_phases = phase_queue.shape[0]
    _queues_in_order(small, large, extra, phase_queue, first_shared, n_chunks, end,
                     queue_free)
    phase_of[:n_chunks] = first_shared
    last_arrival[:] = -1.0
    last_arrival[phase_queue[0]] = 0.0
    finish = 0.0
    waiting = n_chunks
    while waiting > 0:
        c = -1   # the chunk that joins a shared queue next
        for k in range(n_chunks):
            if phase_of[k] < n_phases and (c < 0 or end[k] < end[c]):
                c = k
        i = phase_of[c]
        t = end[c]
        if t == last_arrival[phase_queue[i]]:
            return -1.0
        last_arrival[phase_queue[i]] = t
        while True:   # this phase, then the ones that follow at once
            q = phase_queue[i]
            t = max(t, queue_free[q]) + (large[i] if c < extra else small[i])
            queue_free[q] = t
            i += 1
            if i == n_phases or shared[i]:
                break
        end[c] = t
        phase_of[c] = i
        if i == n_phases:
            finish = max(finish, t)
            waiting -= 1
    return finish


@njit(cache=True)
def _queues_simulated(small, large, extra, phase_queue, n_queues, active, n_chunks, fifo,
                      head, tail, running, run, phase_of, end):
    """Finish time of the chunks through FIFO dimension queues, event by event.

    All chunks are queued for their first phase at time 0 (in chunk order); a queue runs at
    most ``active`` phases at once, admitting its oldest waiter first (queues in order); a
    chunk that finishes a phase joins the queue of its next one; phases ending together are
    handled in the order they started. Chunk ``c`` takes ``large[i]`` in phase ``i`` if
    ``c < extra``, else ``small[i]``. The other arguments are workspaces.
    """
    n_phases = phase_queue.shape[0]
    head[:] = 0
    tail[:] = 0
    running[:] = 0
    q0 = phase_queue[0]
    for c in range(n_chunks):
        phase_of[c] = 0
        fifo[q0, c] = c
    tail[q0] = n_chunks
    n_run = 0    # run[:n_run]: the chunks in a phase, in the order they started
    now = 0.0
    done = 0
    finish = 0.0
    while done < n_chunks * n_phases:
        for q in range(n_queues):
            while running[q] < active and head[q] < tail[q]:
                c = fifo[q, head[q]]
                head[q] += 1
                running[q] += 1
                i = phase_of[c]
                end[c] = now + (large[i] if c < extra else small[i])
                run[n_run] = c
                n_run += 1
        t = np.inf
        for k in range(n_run):
            t = min(t, end[run[k]])
        now = t
        kept = 0
        for k in range(n_run):
            c = run[k]
            if end[c] != t:
                run[kept] = c
                kept += 1
                continue
            running[phase_queue[phase_of[c]]] -= 1
            phase_of[c] += 1
            done += 1
            if phase_of[c] < n_phases:
                q = phase_queue[phase_of[c]]
                fifo[q, tail[q]] = c
                tail[q] += 1
            else:
                finish = max(finish, t)
        n_run = kept
    return finish


@njit(cache=True)
def batched_collective_times(sizes, gbps, latency, gbps_to_bytes_per_ns, splits, active,
                             phase_queue, shared, n_queues, phase_data, phase_passes,
                             phase_groups, group_fraction, group_reduce_fraction, group_count,
                             pair_ptr, pair_dim, pair_hops, endpoint_ns, mem_bw_gbps,
                             reduction_delay_ns, out):
    """One collective's analytical time at every grid point, into ``out``; returns 0, or
    ``BAD_CHUNKS`` or ``NOT_FINITE`` (then ``out`` is incomplete). The inputs are in range
    (:func:`check_ranges`).

    Point ``p`` has ``sizes[p]`` bytes, link bandwidth ``gbps[p, d]`` (GB/s) and latency
    ``latency[p, d]`` (ns) per dimension ``d``; an input with one row holds for every point.
    The collective is ``min(splits, size)`` chunks, the same number at every point (the first
    ``size % n_chunks`` one byte larger), each through phases ``i`` on dimension queues
    ``phase_queue[i]`` (``shared[i]``: that queue serves another phase than 0 and ``i``; at
    most ``active`` phases at once), on ``phase_data[i]`` bytes per chunk byte, paying
    ``phase_passes[i]`` endpoint delays after each step. Phase ``i`` has the step groups
    ``phase_groups[i]:phase_groups[i + 1]``: ``group_count[g]`` identical steps that move
    ``group_fraction[g]`` of the phase's bytes, reduce ``group_reduce_fraction[g]`` of them,
    and whose slowest message is one of the (dimension, hops) pairs
    ``pair_ptr[g]:pair_ptr[g + 1]``. ``mem_bw_gbps < 0``: reductions cost no memory time.
    """
    n_points = out.shape[0]
    if n_points == 0:
        return 0
    n_chunks = min(splits, sizes[0])
    n_phases = phase_queue.shape[0]
    n_dims = gbps.shape[1]
    first_shared = 1
    while first_shared < n_phases and not shared[first_shared]:
        first_shared += 1
    per_byte = np.empty(n_dims)
    lat = np.empty(n_dims)
    small = np.empty(n_phases)    # phase times of a chunk of size // n_chunks bytes
    large = np.empty(n_phases)    # and of one byte more
    # workspaces of the queues
    fifo = np.empty((n_queues, n_chunks * n_phases), np.int64)
    head = np.empty(n_queues, np.int64)
    tail = np.empty(n_queues, np.int64)
    running = np.empty(n_queues, np.int64)
    run = np.empty(n_chunks, np.int64)
    phase_of = np.empty(n_chunks, np.int64)
    end = np.empty(n_chunks)
    queue_free = np.empty(n_queues)
    last_arrival = np.empty(n_queues)
    last_size = -1
    base = extra = 0
    for p in range(n_points):
        size = sizes[p if sizes.shape[0] > 1 else 0]
        if size != last_size:   # (an integer division costs about as much as a phase)
            if min(size, splits) != n_chunks:
                return BAD_CHUNKS
            base = size // n_chunks
            extra = size - base * n_chunks
            last_size = size
        r = p if gbps.shape[0] > 1 else 0
        q = p if latency.shape[0] > 1 else 0
        for d in range(n_dims):
            per_byte[d] = 1.0 / (gbps[r, d] * gbps_to_bytes_per_ns)
            lat[d] = latency[q, d]
        for i in range(n_phases):
            for k in range(2 if extra > 0 else 1):
                t = _phase_ns(np.float64(base + k), phase_data[i], phase_passes[i],
                              phase_groups[i], phase_groups[i + 1], group_fraction,
                              group_reduce_fraction, group_count, pair_ptr, pair_dim,
                              pair_hops, lat, per_byte, endpoint_ns, mem_bw_gbps,
                              reduction_delay_ns)
                if not np.isfinite(t):   # the queues need finite times
                    return NOT_FINITE
                if k == 0:
                    small[i] = t
                else:
                    large[i] = t
        if n_chunks == 1 or (active == 1 and first_shared == n_phases):
            out[p] = _queues_in_order(small, large, extra, phase_queue, n_phases, n_chunks,
                                      end, queue_free)
            continue
        if active == 1:
            finish = _queues_one_in_flight(small, large, extra, phase_queue, shared,
                                           first_shared, n_chunks, phase_of, end, queue_free,
                                           last_arrival)
            if finish >= 0:
                out[p] = finish
                continue
        out[p] = _queues_simulated(small, large, extra, phase_queue, n_queues, active,
                                   n_chunks, fifo, head, tail, running, run, phase_of, end)
    return 0
