"""Testing tools for flowsim and for code plugged into it (algorithms, topologies, models).

* invariant checkers that raise ``AssertionError`` with a clear message:
  :func:`assert_maxmin_fair`, :func:`assert_conservation`, :func:`assert_monotone_time`,
  :func:`assert_schedule_sane`, and the closed forms :func:`closed_form_sent_bytes` they can
  compare with;
* slow, readable reference implementations of the fast kernels, the tests' oracles:
  :func:`run_events_reference`, :func:`message_loads_reference`,
  :func:`expand_paths_reference` (over :func:`fabric_next_hops_reference`),
  :func:`estimate_batch_reference` (with its queues,
  :func:`queue_finish_reference`);
* hypothesis strategies (``hypothesis`` is needed only to build them):
  :func:`flow_instances`, :func:`flow_sets`, :func:`small_networks`,
  :func:`leaf_spine_fabrics`, :func:`system_configs`;
* :class:`FlowProblem`, a flow set with everything needed to time it.
"""

from .closed_forms import closed_form_sent_bytes, group_sent_bytes
from .estimate_reference import estimate_batch_reference, queue_finish_reference
from .invariants import (
    BYTES_RTOL,
    RTOL,
    TIME_ATOL,
    TIME_RTOL,
    assert_conservation,
    assert_maxmin_fair,
    assert_monotone_time,
    assert_schedule_sane,
)
from .problems import FlowProblem
from .reference import (
    expand_paths_reference,
    fabric_next_hops_reference,
    message_loads_reference,
    run_events_reference,
)
from .strategies import (
    flow_instances,
    flow_sets,
    leaf_spine_fabrics,
    small_networks,
    system_configs,
)

__all__ = ["BYTES_RTOL", "RTOL", "TIME_ATOL", "TIME_RTOL", "FlowProblem",
           "assert_conservation", "assert_maxmin_fair", "assert_monotone_time",
           "assert_schedule_sane", "closed_form_sent_bytes", "estimate_batch_reference",
           "expand_paths_reference", "fabric_next_hops_reference", "flow_instances", "flow_sets",
           "group_sent_bytes", "leaf_spine_fabrics",
           "message_loads_reference", "queue_finish_reference", "run_events_reference",
           "small_networks", "system_configs"]
