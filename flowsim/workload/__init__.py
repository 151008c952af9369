"""The workload layer: graphs of compute, collective, send / recv and memory ops, their
readers (ASTRA-sim text, Chakra ``.et``, flowsim YAML), generators and the training-loop
engine. :func:`simulate` runs one on a platform."""

from .graph import Op, Program, Workload, spmd
from .simulate import load_workload, simulate

__all__ = ["Op", "Program", "Workload", "load_workload", "simulate", "spmd"]
