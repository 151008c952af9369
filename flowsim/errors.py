"""One exception hierarchy for everything flowsim reports to its users.

Every error about an input names *where* the bad value came from (a file, a key, an argument),
*what* was expected and *what* was found, so that a user can fix it without a traceback.
"""

from __future__ import annotations

import functools
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: bounded ``repr`` for messages: a two-million-entry list or a deep nest costs nothing
_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 24
_REPR.maxstring = _REPR.maxlong = _REPR.maxother = 200


class FlowsimError(Exception):
    """Base class of every error flowsim raises on purpose."""


class ConfigError(FlowsimError, ValueError):
    """A configuration file, dictionary or argument holds a value flowsim cannot use.

    Errors built by :func:`config_error` also carry the offending ``key`` and what was
    ``expected`` (``None`` otherwise).
    """

    key: str | None = None
    expected: str | None = None


class ConfigTypeError(ConfigError, TypeError):
    """A configuration value or argument has the wrong type (a list where a number belongs,
    a string where a bool belongs, ...). Both ``except ConfigError`` and, as Python users
    expect of a wrongly typed argument, ``except TypeError`` catch it."""


class RoutingError(FlowsimError, ValueError):
    """A route was asked between nodes that do not exist or cannot reach each other."""


class FlowSetError(FlowsimError, ValueError):
    """A flow set is malformed (negative bytes, bad dependency, dependency cycle, ...)."""


class SimulationError(FlowsimError, RuntimeError):
    """The engine could not finish (deadlock, zero-rate flow, internal limit)."""


class FlowsimWarning(UserWarning):
    """Warnings flowsim emits about inputs (unknown or unmodelled keys, ...)."""


def describe(value: Any) -> str:
    """Short printable form of a found value for error messages (one line, at most 80
    characters; a huge integer is not turned into its 4000 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # Python's int-to-text limit, self-nesting lists
        text = f"a {type(value).__name__}"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= 80 else text[:77] + "..."


def unknown_key_error(source: str | None, key: str, known: Any) -> ConfigError:
    """The uniform error for a key that is not part of a config."""
    where = f"{source}: " if source else ""
    return ConfigError(f"{where}unknown key '{key}' (expected one of "
                       f"{', '.join(sorted(known))})")


def config_error(source: str | None, key: str, expected: str, found: Any, *,
                 cls: type[ConfigError] = ConfigError) -> ConfigError:
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
    cls : type
        :class:`ConfigError` or a subclass (:class:`ConfigTypeError` for a value of the wrong
        type).
    """
    if source == "argument":
        if found is ...:
            error = cls(f"argument '{key}' is missing: expected {expected}")
        else:
            error = cls(f"argument '{key}': expected {expected}, found {describe(found)}")
    else:
        where = f"{source}: " if source else ""
        if found is ...:
            error = cls(f"{where}missing key '{key}': expected {expected}")
        else:
            error = cls(f"{where}key '{key}': expected {expected}, found {describe(found)}")
    # the parts, for callers that word the message their own way (command-line options)
    error.key, error.expected = key, expected
    return error


#: a rule between configuration values: ``need(ok, key, expected, found)``
Need = Callable[[bool, str, str, Any], None]


def requirement(source: str | None) -> Need:
    """The rule checker of one source: ``need(ok, key, expected, found)`` raises
    :func:`config_error` naming ``source`` and ``key`` unless ``ok``."""
    def need(ok: bool, key: str, expected: str, found: Any) -> None:
        if not ok:
            raise config_error(source, key, expected, found)
    return need


#: Exceptions of Python and numpy that a bad argument can raise deep inside a call.
_ARGUMENT_FAILURES = (TypeError, ValueError, AttributeError, KeyError, IndexError,
                      OverflowError, ZeroDivisionError, RecursionError)


def public_api(function: F) -> F:
    """Decorator of the public functions: they raise only :class:`FlowsimError` subclasses.

    Inputs are validated at the edge; what slips past (a bytes path, a set where a list
    belongs, ...) and surfaces as a ``TypeError`` / ``ValueError`` / ... from inside numpy or
    the standard library becomes a :class:`ConfigTypeError` (still a ``TypeError``) or a
    :class:`ConfigError` (still a ``ValueError``) naming the function, with the original
    exception chained for debugging.
    """
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except FlowsimError:
            raise
        except _ARGUMENT_FAILURES as exc:
            cls = ConfigTypeError if isinstance(exc, (TypeError, AttributeError)) \
                else ConfigError
            text = " ".join(str(exc).split())[:300]
            raise cls(f"{function.__name__}: an argument flowsim cannot use "
                      f"({type(exc).__name__}: {text})") from exc
    return wrapper  # type: ignore[return-value]
