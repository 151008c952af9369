"""The workload layer: descriptions of training workloads (graphs of compute, collective,
send / recv and memory ops) and their readers (ASTRA-sim text, Chakra ``.et``, flowsim YAML)
and generators. Nothing here runs a workload: :func:`flowsim.simulate` does (system layer)."""

from .graph import Op, Program, Workload, spmd
from .load import load_workload

__all__ = ["Op", "Program", "Workload", "load_workload", "spmd"]
