"""flowsim: a fast analytical and flow-level simulator of distributed ML training platforms.

The public API::

    import flowsim
    net = flowsim.load_network("ring8")  # bundled name or path to a YAML file
    ds = flowsim.simulate_collective(net, "all_reduce", "64MiB", model="flow")
    ds.time_ns
    run = flowsim.simulate(net, "resnet50_dp", model="flow", iterations=2)
"""

from ._version import __version__
from ._warmup import warmup
from .errors import (
                     ConfigError,
                     FlowSetError,
                     FlowsimError,
                     FlowsimWarning,
                     RoutingError,
                     SimulationError,
)
from .estimate import estimate, estimate_batch
from .network import FlowResult, maxmin_rates, simulate_flows
from .sweep import merge, sweep
from .system import SystemConfig, load_system, simulate, simulate_collective
from .topology import Network, NetworkConfig, load_network
from .workload import Workload, load_workload

__all__ = ["ConfigError", "FlowResult", "FlowSetError", "FlowsimError", "FlowsimWarning",
           "Network", "NetworkConfig", "RoutingError", "SimulationError", "SystemConfig",
           "__version__", "estimate", "estimate_batch", "load_network", "load_system",
           "load_workload", "maxmin_rates", "merge", "simulate", "simulate_collective",
           "simulate_flows", "sweep", "warmup", "Workload"]
