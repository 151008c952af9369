"""A slow, readable twin of the batched estimator: :func:`flowsim.estimate_batch` point by
point, in plain Python.

Each point takes the collective's phases (as :func:`flowsim.estimate_batch` derives them once),
prices every chunk's phases with the functions of :mod:`flowsim.system.cost` on Python floats,
and runs the dimension queues as a plain event loop. The fast path
(:func:`flowsim.system._kernels.batched_collective_times`) must give the same times, bit for
bit: the tests' oracle, and the documentation of what the kernel computes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError
from ..system import cost
from ..system.phases import chunk_sizes
from ..topology import Network, load_network
from ..units import network_bandwidth_to_bytes_per_ns
from ._targets import batch_structure, check_collective, check_dims, load_system_cached


def estimate_batch_reference(network: Any, collective: str, size: Any, system: Any = None, *,
                             bandwidth: Any = None, latency: Any = None,
                             dims: Any = None) -> np.ndarray:
    """The analytical times (ns) of :func:`flowsim.estimate_batch` over a broadcast grid,
    one point at a time. ``bandwidth`` and ``latency``: None (the network's) or an array
    whose last axis is the dimension."""
    net = load_network(network)
    if not isinstance(net, Network):
        raise ConfigError("estimate_batch_reference: a multi-dimensional network, as "
                          "estimate_batch takes")
    sys_cfg = load_system_cached(system, net)
    phases = batch_structure(net, sys_cfg, check_collective(collective),
                             check_dims(net, dims))["phases"]
    bw = np.asarray(net.config.bandwidth_gbps if bandwidth is None else bandwidth, np.float64)
    lat = np.asarray(net.config.latency_ns if latency is None else latency, np.float64)
    shape = np.broadcast_shapes(np.shape(size), bw.shape[:-1], lat.shape[:-1])
    sizes = np.broadcast_to(size, shape).ravel()
    bw = np.broadcast_to(bw, shape + bw.shape[-1:]).reshape(-1, net.ndims)
    lat = np.broadcast_to(lat, shape + lat.shape[-1:]).reshape(-1, net.ndims)
    keys = sorted({ph["queue"] for ph in phases})
    queues = [keys.index(ph["queue"]) for ph in phases]
    out = np.empty(sizes.size)
    for p in range(sizes.size):
        bytes_per_ns = [network_bandwidth_to_bytes_per_ns(float(b)) for b in bw[p]]
        durations = [[_phase_ns(ph, float(chunk), bytes_per_ns, [float(x) for x in lat[p]],
                                sys_cfg) for ph in phases]
                     for chunk in chunk_sizes(int(sizes[p]), sys_cfg.splits)]
        out[p] = queue_finish_reference(durations, queues, sys_cfg.active_chunks)
    return out.reshape(shape)


def _phase_ns(phase: dict, chunk: float, bytes_per_ns: list[float], lat: list[float],
              system: Any) -> float:
    """One phase of one chunk: every group of identical steps timed once (its slowest
    message, each alone), with the delays around the steps (:mod:`flowsim.system.cost`)."""
    data = chunk * phase["data_factor"]
    steps, posts, counts = [], [], []
    for (fraction, reduce_fraction, pairs), count in phase["steps"].items():
        nbytes = fraction * data
        times = [cost.message_ns(hops * lat[d], 1.0 / bytes_per_ns[d], nbytes)
                 for d, hops in pairs]
        steps.append(max(times, default=0.0))
        posts.append(cost.post_step_ns(system, reduce_fraction * data, phase["passes"]))
        counts.append(count)
    return cost.phase_ns_grouped(system.endpoint_delay_ns, steps, posts, counts)


def queue_finish_reference(durations: list[list[float]], queues: list[int],
                           active: int) -> float:
    """When the last chunk finishes its last phase: ``durations[c][i]`` is phase ``i`` of
    chunk ``c``, run on dimension queue ``queues[i]``.

    The rules (ASTRA-sim's dimension queues):

    1. Every chunk joins the queue of its first phase at time 0, in chunk order.
    2. A queue runs at most ``active`` phases at once; whenever it has room, it starts its
       waiting chunk that joined first (queues looked at in order).
    3. A chunk whose phase ends joins the queue of its next phase at that moment.
    4. Phases that end at the same moment are handled in the order they started.
    """
    n_chunks, n_phases = len(durations), len(queues)
    phase_of = [0] * n_chunks
    joined = {c: c for c in range(n_chunks)}    # waiting chunk -> its place in join order
    running: dict[int, tuple[float, int]] = {}  # chunk -> (end, place in start order)
    busy = [0] * (max(queues) + 1)
    joins, starts, now, finish = n_chunks, 0, 0.0, 0.0
    while running or joined:
        for q in range(len(busy)):
            while busy[q] < active:
                waiting = [c for c in joined if queues[phase_of[c]] == q]
                if not waiting:
                    break
                c = min(waiting, key=joined.__getitem__)
                del joined[c]
                busy[q] += 1
                running[c] = (now + durations[c][phase_of[c]], starts)
                starts += 1
        now = min(end for end, _ in running.values())
        for c in sorted((c for c in running if running[c][0] == now),
                        key=lambda c: running[c][1]):
            del running[c]
            busy[queues[phase_of[c]]] -= 1
            phase_of[c] += 1
            if phase_of[c] < n_phases:
                joined[c] = joins
                joins += 1
            else:
                finish = max(finish, now)
    return finish
