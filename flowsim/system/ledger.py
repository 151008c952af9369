"""What a schedule records as it runs: bytes per dimension, busy spans, finish times."""

from __future__ import annotations

import numpy as np

from .._arrays import union_length


class Ledger:
    """Running totals of one schedule.

    Attributes
    ----------
    dim_bytes : ndarray, shape (ndims,)
        Bytes sent per logical dimension, every group counted.
    represented_flows : int
        Flows of every group, also those simulated once for all their replicas.
    npu_finish : ndarray, shape (npus,)
        When each NPU last left a phase.
    collective_end : dict of int to float
        When each issued collective's last chunk finished (its issue time until then).
    """

    def __init__(self, npus: int, ndims: int) -> None:
        self.dim_bytes = np.zeros(ndims)
        self.represented_flows = 0
        self.npu_finish = np.zeros(npus)
        self.collective_end: dict[int, float] = {}
        self._busy: dict[int, list[tuple[float, float]]] = {d: [] for d in range(ndims)}

    def busy(self, dims, start: float, end: float) -> None:
        """Dimensions ``dims`` carried a phase or message from ``start`` to ``end``."""
        for d in dims:
            self._busy[d].append((start, end))

    def dim_busy_ns(self) -> np.ndarray:
        """Per dimension, the time during which at least one of its phases was running."""
        out = np.zeros(len(self._busy))
        for d, spans in self._busy.items():
            if spans:
                arr = np.array(spans)
                out[d] = union_length(arr[:, 0], arr[:, 1])
        return out
