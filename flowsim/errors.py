"""One exception hierarchy for everything flowsim reports to its users.

Every error about an input names *where* the bad value came from (a file, a key, an argument),
*what* was expected and *what* was found, so that a user can fix it without a traceback.
"""

from __future__ import annotations

from typing import Any


class FlowsimError(Exception):
    """Base class of every error flowsim raises on purpose."""


class ConfigError(FlowsimError, ValueError):
    """A configuration file, dictionary or argument holds a value flowsim cannot use."""


class RoutingError(FlowsimError, ValueError):
    """A route was asked between nodes that do not exist or cannot reach each other."""


class FlowSetError(FlowsimError, ValueError):
    """A flow set is malformed (negative bytes, bad dependency, dependency cycle, ...)."""


class SimulationError(FlowsimError, RuntimeError):
    """The engine could not finish (deadlock, zero-rate flow, internal limit)."""


class FlowsimWarning(UserWarning):
    """Warnings flowsim emits about inputs (unknown or unmodelled keys, ...)."""


def describe(value: Any) -> str:
    """Short printable form of a found value for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unknown_key_error(source: str | None, key: str, known: Any) -> ConfigError:
    """The uniform error for a key that is not part of a config."""
    where = f"{source}: " if source else ""
    return ConfigError(f"{where}unknown key '{key}' (expected one of "
                       f"{', '.join(sorted(known))})")


def config_error(source: str | None, key: str, expected: str, found: Any) -> ConfigError:
    """Build the uniform error for a bad configuration value.

    Parameters
    ----------
    source : str or None
        File path, or a label such as ``"<dict>"`` or ``"argument"``, naming where the
        value came from.
    key : str
        The key (or argument name) holding the value, e.g. ``"bandwidth[1]"``.
    expected : str
        What a valid value looks like, in words.
    found : Any
        The offending value (``...`` when the key is missing).
    """
    if source == "argument":
        if found is ...:
            return ConfigError(f"argument '{key}' is missing: expected {expected}")
        return ConfigError(f"argument '{key}': expected {expected}, found {describe(found)}")
    where = f"{source}: " if source else ""
    if found is ...:
        return ConfigError(f"{where}missing key '{key}': expected {expected}")
    return ConfigError(f"{where}key '{key}': expected {expected}, found {describe(found)}")
