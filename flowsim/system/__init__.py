"""System layer: system configs, chunk/phase composition, scheduling onto the network models'
timers, and the engines that run collectives and workloads.

Names load on first use (a collective does not import the training-loop engine)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .collective import run_collective, simulate_collective
    from .config import SystemConfig, parse_system_config
    from .load import load_system, read_system_config
    from .simulate import simulate

_NAMES = {"run_collective": ".collective", "simulate_collective": ".collective",
          "SystemConfig": ".config", "parse_system_config": ".config",
          "load_system": ".load", "read_system_config": ".load",
          "simulate": ".simulate"}

__all__ = ["SystemConfig", "load_system", "parse_system_config", "read_system_config",
           "run_collective", "simulate", "simulate_collective"]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
