"""Memory ops at run time: local memory and the remote memories of a
:class:`~flowsim.workload.memory.MemoryConfig` serving requests."""

from __future__ import annotations

import numpy as np

from ..workload.memory import MemoryConfig


class MemoryServers:
    """Serves memory requests and returns when each ends."""

    def __init__(self, config: MemoryConfig, npus: int, local_bytes_per_ns: float) -> None:
        self.config = config
        self.local_bytes_per_ns = local_bytes_per_ns
        servers = {"per_node": -(-npus // config.npus_per_node), "pool": 1}.get(config.kind, 0)
        self._free = np.zeros(servers)

    def serve(self, npus: np.ndarray, ready: np.ndarray, nbytes: float, remote: bool
              ) -> np.ndarray:
        """End times of one request of ``nbytes`` from each NPU, issued at ``ready``."""
        cfg = self.config
        if not remote or cfg.kind == "none":
            return ready + nbytes / self.local_bytes_per_ns
        service = cfg.latency_ns + nbytes / cfg.bytes_per_ns
        if cfg.kind == "per_npu":
            return ready + service
        server = npus // cfg.npus_per_node if cfg.kind == "per_node" else np.zeros_like(npus)
        end = np.empty_like(ready)
        for i in np.lexsort((npus, ready)):  # first come, first served
            start = max(ready[i], self._free[server[i]])
            end[i] = self._free[server[i]] = start + service
        return end
