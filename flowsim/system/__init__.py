"""System layer: system configs, chunk/phase composition, scheduling onto the network models'
timers, and the engines that run collectives and workloads."""

from .collective import simulate_collective
from .config import SystemConfig, parse_system_config
from .load import load_system, read_system_config
from .simulate import simulate

__all__ = ["SystemConfig", "load_system", "parse_system_config", "read_system_config",
           "simulate", "simulate_collective"]
