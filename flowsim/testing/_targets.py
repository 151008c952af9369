"""The fast code that :mod:`flowsim.testing` checks and stands beside, imported in one place.

When a module moves, fix its import here; the references, checkers, strategies and tests
reach the fast code only through these names.
"""

from __future__ import annotations

from ..estimate import _check_dims as check_dims
from ..estimate import _collective as check_collective
from ..estimate import _structure as batch_structure
from ..estimate import _system as load_system_cached
from ..network import (
    FlowEngine,
    FlowResult,
    maxmin_rates,
    maxmin_rates_reference,
    simulate_flows,
)
from ..network._messages import message_loads
from ..system._kernels import _queues_in_order as queues_in_order
from ..system._kernels import _queues_one_in_flight as queues_one_in_flight
from ..system._kernels import _queues_simulated as queues_simulated
from ..topology._paths import EXPANDED, NO_CONVERGENCE, expand_paths
from ..topology.fabric_network import path_kernel_args

__all__ = ["EXPANDED", "NO_CONVERGENCE", "FlowEngine", "FlowResult", "batch_structure",
           "check_collective", "check_dims", "expand_paths", "path_kernel_args",
           "load_system_cached", "maxmin_rates", "maxmin_rates_reference", "message_loads",
           "queues_in_order", "queues_one_in_flight", "queues_simulated", "simulate_flows"]
