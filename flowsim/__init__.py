"""flowsim: a fast analytical and flow-level simulator of distributed ML training platforms.

The public API::

    import flowsim
    net = flowsim.load_network("ring8")  # bundled name or path to a YAML file
    ds = flowsim.simulate_collective(net, "all_reduce", "64MiB", model="flow")
    ds.time_ns
    run = flowsim.simulate(net, "resnet50_dp", model="flow", iterations=2)

Names are imported when first used (PEP 562), so that ``import flowsim`` and the command
line's ``--help`` / ``--version`` load neither numpy, xarray nor Numba.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import keep_functions_over_submodules, lazy_names
from ._version import __version__
from .errors import (
                     ConfigError,
                     FlowSetError,
                     FlowsimError,
                     FlowsimWarning,
                     RoutingError,
                     SimulationError,
)

if TYPE_CHECKING:  # the real imports, for type checkers and the API reference
    from ._warmup import warmup
    from .estimate import estimate, estimate_batch
    from .network import FlowResult, maxmin_rates, simulate_flows
    from .sweep import merge, sweep
    from .system import (
        SystemConfig,
        load_system,
        run_collective,
        run_training,
        simulate,
        simulate_collective,
    )
    from .topology import Network, NetworkConfig, load_network
    from .workload import Workload, load_workload

#: Public name -> the module that defines it (imported on first access).
_LAZY = {
    "warmup": "._warmup",
    "estimate": ".estimate", "estimate_batch": ".estimate",
    "FlowResult": ".network", "maxmin_rates": ".network", "simulate_flows": ".network",
    "merge": ".sweep", "sweep": ".sweep",
    "SystemConfig": ".system", "load_system": ".system", "simulate": ".system",
    "simulate_collective": ".system", "run_collective": ".system", "run_training": ".system",
    "Network": ".topology", "NetworkConfig": ".topology", "load_network": ".topology",
    "Workload": ".workload", "load_workload": ".workload",
}
#: Subpackages and modules reachable as attributes (``flowsim.results.from_attrs``).
_SUBMODULES = {"collectives", "compute", "network", "results", "system", "testing", "topology",
               "workload", "errors", "units", "resources", "cli", "cli_args"}
#: Public functions named like the module that defines them: ``flowsim.sweep`` and
#: ``flowsim.estimate`` are the functions, as they were when this package imported eagerly.
_SHADOWED = {"sweep", "estimate"}

__all__ = ["ConfigError", "FlowResult", "FlowSetError", "FlowsimError", "FlowsimWarning",
           "Network", "NetworkConfig", "RoutingError", "SimulationError", "SystemConfig",
           "__version__", "estimate", "estimate_batch", "load_network", "load_system",
           "load_workload", "maxmin_rates", "merge", "run_collective", "run_training",
           "simulate", "simulate_collective", "simulate_flows", "sweep", "warmup", "Workload"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), _SUBMODULES)


keep_functions_over_submodules(__name__, _SHADOWED)
