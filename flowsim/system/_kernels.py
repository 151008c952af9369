"""Numba kernels of the system layer (plain arrays in; the Python wrappers validate)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def queue_schedule(durations, queues, n_queues, active):
    """Finish time of every grid point: chunks through FIFO dimension queues.

    ``durations[p, c, i]`` is phase ``i`` of chunk ``c`` at point ``p``; ``queues[i]`` its
    queue. All chunks are queued for their first phase at time 0 (in chunk order); a queue
    runs at most ``active`` phases at once; a chunk that finishes a phase joins the queue of
    its next one; phases ending together are handled in the order they started.
    """
    n_points, n_chunks, n_phases = durations.shape
    out = np.zeros(n_points)
    total = n_chunks * n_phases
    if n_chunks == 1:  # one chunk: its phases in a row
        for p in range(n_points):
            acc = 0.0
            for i in range(n_phases):
                acc += durations[p, 0, i]
            out[p] = acc
        return out
    phase_of = np.zeros(n_chunks, np.int64)
    end = np.zeros(n_chunks)
    start_seq = np.zeros(n_chunks, np.int64)
    waiting_since = np.zeros(n_chunks, np.int64)  # enqueue sequence, -1: not waiting
    running = np.zeros(n_queues, np.int64)
    for p in range(n_points):
        phase_of[:] = 0
        end[:] = np.inf
        running[:] = 0
        for c in range(n_chunks):
            waiting_since[c] = c
        seq = n_chunks
        now = 0.0
        done = 0
        started = 0
        finish = 0.0
        while done < total:
            # admit: queues in order, oldest waiter first
            for q in range(n_queues):
                while running[q] < active:
                    best = -1
                    for c in range(n_chunks):
                        if waiting_since[c] >= 0 and phase_of[c] < n_phases and \
                                queues[phase_of[c]] == q:
                            if best < 0 or waiting_since[c] < waiting_since[best]:
                                best = c
                    if best < 0:
                        break
                    waiting_since[best] = -1
                    running[q] += 1
                    end[best] = now + durations[p, best, phase_of[best]]
                    start_seq[best] = started
                    started += 1
            # next completion(s)
            t = np.inf
            for c in range(n_chunks):
                if end[c] < t:
                    t = end[c]
            now = t
            while True:
                first = -1
                for c in range(n_chunks):
                    if end[c] == t and (first < 0 or start_seq[c] < start_seq[first]):
                        first = c
                if first < 0:
                    break
                c = first
                end[c] = np.inf
                running[queues[phase_of[c]]] -= 1
                phase_of[c] += 1
                done += 1
                if phase_of[c] < n_phases:
                    waiting_since[c] = seq
                    seq += 1
                else:
                    finish = max(finish, t)
        out[p] = finish
    return out
