"""The analytical cost model: the one place that prices messages, steps, reductions and phases.

These are the rules of ASTRA-sim's congestion-unaware analytical backend
(``validation/astra_sim/README.md``), written once and used by the analytical timer, the
phase plans that time a whole barrier phase at once and the per-NPU (DAG) phases. The batched
estimator's kernel (``flowsim.system._kernels``) restates them on scalars, operation for
operation; its plain-Python twin ``flowsim.testing.estimate_batch_reference`` calls these
functions, and a test holds the two equal bit for bit:

* a message of ``m`` bytes on a path takes ``latency(path) + m * ns_per_byte(path)``, where
  ``ns_per_byte`` is ``1 / bottleneck`` (or, for a message sprayed over several paths, the
  pace of its most loaded link): :func:`message_ns`;
* a barrier step lasts as long as its slowest message: :func:`step_ns`;
* the local reduction of ``m`` received bytes costs ``3 * floor(m / local-mem-bw)`` ns (one
  write and two reads; ``local-mem-bw`` in GB/s with GB = 10^9 B, so bytes / (GB/s) is ns),
  plus ``local-reduction-delay`` when the shared-bus model is on: :func:`reduction_ns`;
* a phase of ``s`` steps pays one endpoint delay before its first step and, after every step,
  one endpoint delay (with ``ring-delays: flat``, one per pass of the flat ring through the
  phase's dimension) plus the reduction of what that step received: :func:`step_delays`;
* a barrier phase started at ``t`` therefore ends at
  ``t + d_0 + step_0 + d_1 + step_1 + ... + step_{s-1} + d_s``: :func:`phase_end`, summed in
  that order so that a phase timed at once equals the same phase timed step by step, bit for
  bit. :func:`phase_ns_grouped` is the same sum with identical steps multiplied by their
  count, the vectorised form the estimator uses (equal up to rounding).

The flow model replaces only :func:`step_ns` (messages share links max-min fairly); the
delays around the steps are the same in both models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..collectives.base import Step


class DelayParameters(Protocol):
    """The system settings the delays around steps depend on (a
    :class:`~flowsim.system.config.SystemConfig` has them)."""

    @property
    def endpoint_delay_ns(self) -> float: ...

    @property
    def local_mem_bw_gbps(self) -> float | None: ...

    @property
    def local_reduction_delay_ns(self) -> float: ...

def ns_per_byte(bottleneck: np.ndarray) -> np.ndarray:
    """Time per byte of a message alone on a path whose slowest link carries ``bottleneck``
    bytes/ns (0 for an empty path, whose bottleneck is infinite)."""
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(bottleneck), 1.0 / bottleneck, 0.0)


def message_ns(latency_ns, per_byte_ns, nbytes):
    """Arrival of a message after it starts, when it is alone on the network (ns).

    Parameters
    ----------
    latency_ns : float or ndarray
        Path latency (the longest path of a multi-path message).
    per_byte_ns : float or ndarray
        ns per byte alone (see :func:`ns_per_byte`).
    nbytes : float or ndarray
        Bytes of the message. All three broadcast together.
    """
    return latency_ns + nbytes * per_byte_ns


def step_ns(latency_ns: np.ndarray, per_byte_ns: np.ndarray, nbytes: float) -> float:
    """Length of a barrier step: its slowest message, each alone (0 for a step without
    messages)."""
    if latency_ns.size == 0:
        return 0.0
    return float(np.max(message_ns(latency_ns, per_byte_ns, nbytes)))


def reduction_ns(nbytes, local_mem_bw_gbps: float | None, local_reduction_delay_ns: float):
    """Cost of reducing ``nbytes`` received bytes locally, as ASTRA-sim charges it (ns).

    ``3 * floor(nbytes / local_mem_bw_gbps)`` (free without a local memory bandwidth) plus the
    fixed ``local_reduction_delay_ns``; nothing at all for ``nbytes <= 0``. ``nbytes`` may be an
    array (the estimator's grid points).
    """
    if np.ndim(nbytes) == 0:   # the scheduler's scalar path, without numpy's overhead
        if nbytes <= 0:
            return 0.0
        if local_mem_bw_gbps is None:
            return local_reduction_delay_ns
        return local_reduction_delay_ns + 3.0 * math.floor(nbytes / local_mem_bw_gbps)
    nbytes = np.asarray(nbytes, np.float64)
    positive = nbytes > 0
    cost = np.where(positive, local_reduction_delay_ns, 0.0)
    if local_mem_bw_gbps is not None:
        cost = cost + np.where(positive, 3.0 * np.floor(nbytes / local_mem_bw_gbps), 0.0)
    return cost


def post_step_ns(system: DelayParameters, reduce_bytes: float, passes: int = 1) -> float:
    """The wait after a step: ``passes`` endpoint delays (one, or a flat ring's passes through
    the step's dimension: ``Phase.delay_passes``) plus the reduction of what it received."""
    return passes * system.endpoint_delay_ns + reduction_ns(
        reduce_bytes, system.local_mem_bw_gbps, system.local_reduction_delay_ns)


def step_delays(system: DelayParameters, steps: Sequence[Step], data: float,
                passes: int = 1) -> list[float]:
    """The waits of a phase of ``steps`` on a buffer of ``data`` bytes: ``delays[i]`` before
    step ``i`` (the endpoint delay, then each previous step's post-step wait), and
    ``delays[-1]`` after the last step. ``len(delays) == len(steps) + 1``."""
    return [system.endpoint_delay_ns] + [post_step_ns(system, s.reduce_fraction * data, passes)
                                         for s in steps]


def phase_end(start: float, delays: Sequence[float], durations: Sequence[float]) -> float:
    """When a barrier phase started at ``start`` ends: ``delays[i]`` then ``durations[i]`` for
    every step, then ``delays[-1]``; added in that order (equal to timing it step by step)."""
    end = start
    for delay, duration in zip(delays, durations):
        end = end + delay + duration
    return end + delays[-1]


def phase_ns_grouped(endpoint_ns: float | np.ndarray, step_ns_: Sequence, post_ns: Sequence,
                     counts: Sequence[int]):
    """The length of a phase whose steps come in groups of identical steps: ``counts[k]`` steps
    lasting ``step_ns_[k]`` each followed by ``post_ns[k]`` (arrays broadcast over grid points).

    The same sum as :func:`phase_end` minus its start, with each group multiplied by its count
    instead of added step by step: equal up to rounding, and independent of the step count.
    """
    total = endpoint_ns
    for duration, post, count in zip(step_ns_, post_ns, counts):
        total = total + (duration + post) * count if count != 1 else total + duration + post
    return total
