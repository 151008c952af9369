"""The compiled event loop's parts (:mod:`._loop_kernels`): its working arrays, and binary
heaps on plain arrays.

Each heap function takes the few arrays of one heap and its current size, so that a call
costs no more than a handful of reference counts (Numba counts every array handed to a
function, and a loop of 50,000 ops pays for each).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _op_before(eh_t, eh_i, a, b):
    """Ops in the engine's order: (ready time, program, position in the program)."""
    if eh_t[a] != eh_t[b]:
        return eh_t[a] < eh_t[b]
    if eh_i[a, 0] != eh_i[b, 0]:
        return eh_i[a, 0] < eh_i[b, 0]
    return eh_i[a, 1] < eh_i[b, 1]


@njit(cache=True)
def _swap_ops(eh_t, eh_i, a, b):
    eh_t[a], eh_t[b] = eh_t[b], eh_t[a]
    for r in range(3):
        eh_i[a, r], eh_i[b, r] = eh_i[b, r], eh_i[a, r]


@njit(cache=True)
def push_op(eh_t, eh_i, n, t, program, order, op):
    """Add op ``op`` (of ``program``, at ``order`` in it) ready at ``t`` to the heap of
    ``n`` ops."""
    eh_t[n] = t
    eh_i[n, 0], eh_i[n, 1], eh_i[n, 2] = program, order, op
    while n > 0:
        parent = (n - 1) >> 1
        if not _op_before(eh_t, eh_i, n, parent):
            break
        _swap_ops(eh_t, eh_i, n, parent)
        n = parent


@njit(cache=True)
def pop_op(eh_t, eh_i, n):
    """Remove the first of the heap's ``n`` ops; returns its (ready time, op)."""
    t, op = eh_t[0], eh_i[0, 2]
    n -= 1
    if n > 0:
        _swap_ops(eh_t, eh_i, 0, n)
        i = 0
        while True:
            left, best = 2 * i + 1, i
            if left < n and _op_before(eh_t, eh_i, left, best):
                best = left
            if left + 1 < n and _op_before(eh_t, eh_i, left + 1, best):
                best = left + 1
            if best == i:
                break
            _swap_ops(eh_t, eh_i, i, best)
            i = best
    return t, op


@njit(cache=True)
def _pair_before(keys, seqs, a, b):
    return keys[a] < keys[b] or (keys[a] == keys[b] and seqs[a] < seqs[b])


@njit(cache=True)
def _swap_pairs(keys, seqs, vals, a, b):
    keys[a], keys[b] = keys[b], keys[a]
    seqs[a], seqs[b] = seqs[b], seqs[a]
    vals[a], vals[b] = vals[b], vals[a]


@njit(cache=True)
def push_pair(keys, seqs, vals, base, n, key, seq, val):
    """Add ``val`` under (``key``, ``seq``) to the heap of ``n`` entries at ``base``."""
    i = n
    keys[base + i], seqs[base + i], vals[base + i] = key, seq, val
    while i > 0:
        p = (i - 1) >> 1
        if not _pair_before(keys, seqs, base + i, base + p):
            break
        _swap_pairs(keys, seqs, vals, base + i, base + p)
        i = p


@njit(cache=True)
def pop_pair(keys, seqs, vals, base, n):
    """Remove the (key, seq)-least of the heap of ``n`` entries at ``base``; returns its
    value."""
    out = vals[base]
    n -= 1
    if n > 0:
        _swap_pairs(keys, seqs, vals, base, base + n)
        i = 0
        while True:
            left, best = 2 * i + 1, i
            if left < n and _pair_before(keys, seqs, base + left, base + best):
                best = left
            if left + 1 < n and _pair_before(keys, seqs, base + left + 1, base + best):
                best = left + 1
            if best == i:
                break
            _swap_pairs(keys, seqs, vals, base + i, base + best)
            i = best
    return out


@njit(cache=True)
def workspace(n_ops, n_npus, n_rows, n_cols, n_dims, n_events, n_queues, queue_room,
              mail_room, n_chunk_instances, n_issues, inst_ptr):
    """The loop's working arrays, allocated once, in the order :func:`~._loop_kernels.
    run_loop` unpacks them."""
    f, i = np.float64, np.int64
    chunks = max(n_chunk_instances, 1)
    return (
        np.full((n_ops, 5), np.nan), np.zeros((n_ops, 4), i),   # op state: floats, ints
        np.zeros((n_npus, 6)), np.zeros((3, n_rows, n_cols)), np.zeros(n_dims),
        np.empty(n_ops), np.empty((n_ops, 3), i),   # ops waiting: (ready, program, order)
        # the timer: (time, token) -> token; an event per token (kind, reference, start)
        np.empty(n_events), np.empty(n_events, i), np.empty(n_events, i),
        np.empty(n_events, i), np.empty(n_events, i), np.empty(n_events, f),
        # dimension queues: per queue a heap of chunk instances by (priority key, arrival);
        # its size, chunks running, changed since the last admission, rank of first use
        np.empty(queue_room), np.empty(queue_room, i), np.empty(queue_room, i),
        np.zeros(n_queues, i), np.zeros(n_queues, i), np.zeros(n_queues, np.bool_),
        np.full(n_queues, -1, i), np.empty(n_queues, i),
        # issued collectives: issue time, latest chunk end, chunks left; meetings' members
        # (in arrival order) and how many are in; issues to make at one arrival
        np.full(n_issues, np.nan), np.full(n_issues, np.nan), np.zeros(n_issues, i),
        np.empty(max(inst_ptr[-1], 1), i), np.zeros(inst_ptr.shape[0] - 1, i),
        np.empty(max(inst_ptr.shape[0] - 1, 1), i),
        # chunk instances: issue, chunk, position of its phase, priority key
        np.empty(chunks, i), np.empty(chunks, i), np.zeros(chunks, i), np.empty(chunks),
        # mailboxes: arrived messages (send op, arrival), posted receives
        np.empty(mail_room, i), np.empty(mail_room), np.empty(mail_room, i),
        np.empty(n_events, i), np.empty(n_events, i), np.empty((2, n_events)),   # busy spans
        # work lists: finished issues (id; end, with update delay), completions (op; end,
        # seen), receives meeting messages ((receive, send); arrival), ops made ready,
        # chunks to queue
        np.empty(n_issues, i), np.empty((n_issues, 2)), np.empty(n_ops + 4, i),
        np.empty((n_ops + 4, 2)), np.empty((2, 2), i), np.empty(2), np.empty(n_ops, i),
        np.empty(chunks, i))
