"""``simulate_collective`` with a custom implementation (ASTRA-sim's
``*-implementation-custom``): the collective runs as the per-rank Chakra send / recv programs
its traces hold, never silently as the native algorithm."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import ConfigError, FlowsimWarning
from ..workload.graph import Op, spmd
from .config import SystemConfig
from .scheduler import Schedule
from .workload_engine import WorkloadEngine


def run_custom_collective(net: Any, system: SystemConfig, model: str, collective: str,
                          size: int, *, dims: tuple[int, ...] | None, group: tuple[int, ...],
                          prefix: str, trace: bool, replay: bool = True) -> Schedule:
    """Run one ``collective`` whose system config names a custom implementation at
    ``prefix``; returns the schedule that carried its messages, its ledger holding the
    collective's finish (entry 0) and every NPU's.

    Raises
    ------
    ConfigError
        ``dims`` or a trace asked for: a custom implementation's traces name the ranks of one
        communicator (all NPUs, or ``group``) and carry messages, not steps.
    """
    where = f"{system.source}: key '{collective.replace('_', '-')}-implementation-custom'"
    if dims is not None:
        raise ConfigError(f"{where}: a custom implementation runs over all NPUs or a group "
                          f"(its traces name ranks); dims cannot select part of it")
    if trace:
        raise ConfigError(f"{where}: a custom implementation has no steps to trace (it runs "
                          f"as send / recv messages); run without a trace")
    warnings.warn(f"{where}: runs the traces at {prefix}, which move the bytes written in "
                  f"them (comm_size) whatever the collective's size, as in ASTRA-sim "
                  f"({size} B asked)", FlowsimWarning, stacklevel=3)
    op = Op(0, "collective", f"custom {collective}", collective=collective, size=size,
            group=group)
    engine = WorkloadEngine(net, spmd([op], net.npus, source=prefix), system, model,
                            speed=np.ones(net.npus), replay=replay)
    record = engine.run()
    ledger = engine.schedule.ledger
    ledger.collective_end[0] = record.time_ns
    ledger.npu_finish[:] = record.npu_finish_ns
    return engine.schedule
