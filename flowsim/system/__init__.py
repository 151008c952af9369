"""System layer: system configs, chunk/phase composition, scheduling onto the network models'
timers, and the engines that run collectives and workloads.

Names load on first use (a collective does not import the training-loop engine)."""

from typing import TYPE_CHECKING

from .._lazy import keep_functions_over_submodules, lazy_names

if TYPE_CHECKING:
    from .collective import run_collective, simulate_collective
    from .config import SystemConfig, parse_system_config
    from .load import load_system, read_system_config
    from .simulate import run_training, simulate

_NAMES = {"run_collective": ".collective", "simulate_collective": ".collective",
          "SystemConfig": ".config", "parse_system_config": ".config",
          "load_system": ".load", "read_system_config": ".load",
          "simulate": ".simulate", "run_training": ".simulate"}

__all__ = ["SystemConfig", "load_system", "parse_system_config", "read_system_config",
           "run_collective", "run_training", "simulate", "simulate_collective"]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
keep_functions_over_submodules(__name__, {"simulate"})
