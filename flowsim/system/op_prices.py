"""What a compute op costs: its traced duration, or its kernels priced by a compute model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..workload.graph import Op

if TYPE_CHECKING:
    from ..compute import ComputeModel


def compute_op_ns(op: Op, compute: ComputeModel, memo: dict[int, tuple[tuple, float]],
                  where: str = "") -> float:
    """A compute op's time from its kernels (memoised in ``memo`` per kernels tuple:
    generators share one tuple between the ops of every micro-batch), or from its FLOPs and
    bytes. A kernel the device cannot run (MXFP8 or NVFP4 before Blackwell) is one error naming
    ``where``, the op's program (its workload file)."""
    if not op.kernels:
        return compute.work_ns(op.flops, op.mem_bytes) if (op.flops or op.mem_bytes) else 0.0
    priced = memo.get(id(op.kernels))
    if priced is None:   # the tuple is kept beside its price, so its id is not reused
        try:
            price = compute.kernels_ns(op.kernels)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None
        priced = memo[id(op.kernels)] = (op.kernels, price)
    return priced[1]
