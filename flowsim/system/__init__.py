"""System layer: system configs, chunk/phase composition and scheduling."""

from .collective import simulate_collective
from .config import SystemConfig, parse_system_config
from .load import load_system, read_system_config

__all__ = ["SystemConfig", "load_system", "parse_system_config", "read_system_config",
           "simulate_collective"]
