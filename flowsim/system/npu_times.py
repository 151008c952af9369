"""The times of a program's tracked NPUs: arrays, or plain floats when it tracks one NPU.

The workload engine keeps, for every op of a program, when it became ready, started, ended
and was seen to end, one entry per tracked NPU (:attr:`ProgramState.rep`). Most programs of
a training run track one NPU: a uniform SPMD program, a pipeline stage, or a Chakra rank.
There, numpy's cost per call (about a microsecond) is twenty times a float operation, and an
op takes a dozen of them; :class:`ScalarTimes` does the same arithmetic on floats (IEEE
double either way, so the results are the same bits) and :class:`ArrayTimes` on arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Times = Any   # a float (one tracked NPU) or an ndarray (one entry per tracked NPU)


class ArrayTimes:
    """Times as arrays over the tracked NPUs ``rep`` of a program."""

    scalar = False

    def __init__(self, rep: np.ndarray) -> None:
        self.rep = rep

    maximum = staticmethod(np.maximum)

    @staticmethod
    def latest(times: list) -> Times:
        """The element-wise latest of same-shape time arrays."""
        return times[0] if len(times) == 1 else np.max(times, axis=0)

    def full(self, t: float) -> Times:
        return np.full(self.rep.size, t)

    @staticmethod
    def peak(times: Times) -> float:
        return float(times.max())

    @staticmethod
    def first(times: Times) -> Times:
        return times[0]

    def read(self, values: np.ndarray) -> Times:
        """The tracked NPUs' entries of a per-NPU array."""
        return values[self.rep]

    def write(self, values: np.ndarray, times: Times) -> None:
        values[self.rep] = times

    def raise_to(self, values: np.ndarray, times: Times) -> None:
        """``values[rep] = max(values[rep], times)``."""
        values[self.rep] = np.maximum(values[self.rep], times)

    def add_to(self, values: np.ndarray, amounts: Times) -> None:
        values[self.rep] += amounts

    @staticmethod
    def total(amounts: Times) -> float:
        return float(amounts.sum())

    @staticmethod
    def as_array(times: Times) -> np.ndarray:
        return times

    @staticmethod
    def from_array(times: np.ndarray) -> Times:
        return times


class ScalarTimes:
    """Times as floats: the program tracks one NPU (``rep[0]``)."""

    scalar = True

    def __init__(self, rep: np.ndarray) -> None:
        self.npu = int(rep[0])

    @staticmethod
    def maximum(a: Times, b: Times) -> Times:
        return a if a >= b else b

    @staticmethod
    def latest(times: list) -> Times:
        return times[0] if len(times) == 1 else max(times)

    @staticmethod
    def full(t: float) -> Times:
        return t

    @staticmethod
    def peak(times: Times) -> float:
        return float(times)

    @staticmethod
    def first(times: Times) -> Times:
        return times

    def read(self, values: np.ndarray) -> Times:
        return float(values[self.npu])

    def write(self, values: np.ndarray, times: Times) -> None:
        values[self.npu] = times

    def raise_to(self, values: np.ndarray, times: Times) -> None:
        if times > values[self.npu]:
            values[self.npu] = times

    def add_to(self, values: np.ndarray, amounts: Times) -> None:
        values[self.npu] += amounts

    @staticmethod
    def total(amounts: Times) -> float:
        return float(amounts)

    @staticmethod
    def as_array(times: Times) -> np.ndarray:
        return np.full(1, times)

    @staticmethod
    def from_array(times: np.ndarray) -> Times:
        return float(times[0])


def npu_times(rep: np.ndarray) -> ArrayTimes | ScalarTimes:
    """The time representation of a program tracking the NPUs ``rep``."""
    return ScalarTimes(rep) if rep.size == 1 else ArrayTimes(rep)
