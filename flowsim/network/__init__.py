"""Network layer: the max-min kernel and the event-driven flow engine (both models)."""

from .engine import MODELS, FlowEngine
from .flows import FlowResult, simulate_flows
from .maxmin import maxmin_rates, maxmin_rates_reference

__all__ = ["MODELS", "FlowEngine", "FlowResult", "maxmin_rates", "maxmin_rates_reference",
           "simulate_flows"]
