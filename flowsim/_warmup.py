"""``flowsim.warmup()``: compile (or load from the on-disk cache) every jitted kernel."""

from __future__ import annotations

import time


def warmup() -> float:
    """Run a tiny case through every kernel so that later calls pay no compilation; returns
    the seconds it took. Call it once at the start of an array-job task or a worker."""
    import numpy as np

    from .estimate import estimate_batch
    from .network import maxmin_rates
    from .system import run_training, simulate_collective
    from .workload.graph import Op, spmd

    start = time.perf_counter()
    net = {"topology": ["Ring"], "npus_count": [4], "bandwidth": [1], "latency": [1]}
    maxmin_rates(np.array([1.0, 1.0]), np.array([0, 1, 2]), np.array([0, 1]))
    for model in ("analytical", "flow"):
        simulate_collective(net, "all_reduce", 1 << 10, model=model)
        simulate_collective(net, "all_reduce", 1 << 10, {"step-synchronization": "per_npu"},
                            model=model)
    # a fabric with two spines: ECMP path expansion and per-message loads
    fabric = {"fabric": {"generator": "leaf_spine", "hosts": 2, "npus_per_host": 2,
                         "scale_up": {"bandwidth": 1, "latency": 1},
                         "nic": {"bandwidth": 1, "latency": 1}, "hosts_per_leaf": 1,
                         "oversubscription": 1, "spines": 2, "spine_latency": 1}}
    simulate_collective(fabric, "all_to_all", 1 << 10,
                        {"all-to-all-implementation": ["direct", "direct"]}, model="flow")
    estimate_batch(net, "all_reduce", np.array([1 << 10]))
    # the analytical model's compiled training loop
    run_training(net, spmd([Op(0, "compute", duration_ns=1.0),
                            Op(1, "collective", collective="all_reduce", size=1 << 10,
                               deps=(0,))], 4))
    return time.perf_counter() - start
