"""Network layer: the max-min kernel and the event-driven flow engine (both models).

Names load on first use: the engine's Numba kernels load only when a run needs them."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .engine import FlowEngine
    from .flows import FlowResult, simulate_flows
    from .maxmin import maxmin_rates, maxmin_rates_reference
    from .models import MODELS

_NAMES = {"MODELS": ".models", "FlowEngine": ".engine",
          "FlowResult": ".flows", "simulate_flows": ".flows",
          "maxmin_rates": ".maxmin", "maxmin_rates_reference": ".maxmin"}

__all__ = ["MODELS", "FlowEngine", "FlowResult", "maxmin_rates", "maxmin_rates_reference",
           "simulate_flows"]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
