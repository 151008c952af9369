"""One validation toolkit: typed readers of config fields, one argument order, one message.

Every reader of a mapping takes ``(data, key, ...)`` and then keyword-only arguments: the
``source`` naming where the mapping came from (a file path, ``"<dict>"``, or ``"argument"``
for a Python argument), the ``default`` used when the key is absent (leave it out and the key
is required), the constraints, and a ``prefix`` that names the enclosing keys in messages
(``prefix="fabric.nic."`` reports ``fabric.nic.bandwidth``). It returns a plain, hashable
Python value (``int``, ``float``, ``bool``, ``str``; ``read_list`` a list of such values)
or raises the uniform :func:`~flowsim.errors.config_error`: file, key, what was expected,
what was found. A value of the wrong type raises :class:`~flowsim.errors.ConfigTypeError`
(a :class:`~flowsim.errors.ConfigError` that is also a ``TypeError``).

The ``as_*`` functions check one value already taken out of its container (a list item, a
function argument): ``as_int(value, source=..., key=...)``. A ``read_list`` item reader is
any such function, e.g. ``functools.partial(as_int, minimum=2)``.

What the readers promise:

* integers are Python ints (numpy integers and whole floats such as ``8.0`` are accepted,
  booleans are not) within ``minimum``/``maximum`` (at most :data:`MAX_INT` unless said);
* numbers are finite floats within their range (no NaN, inf, ``1e400``, 400-digit ints);
* booleans are ``true``/``false`` only (ASTRA-sim's ``0``/``1`` where its formats use
  them, with ``zero_one=True``), never a truthy string such as ``'no'``;
* a choice is one of the declared strings (a list or ``{}`` where a name belongs is an error,
  not a ``TypeError: unhashable``).

Physical quantities have documented sane ranges (:data:`BANDWIDTH_GBPS`,
:data:`LATENCY_NS`, :data:`DURATION_NS`, ...): a value outside is almost always a typo or a
unit slip, and its products in the engine could overflow to ``inf`` or ``NaN``.
"""

from __future__ import annotations

import math
import numbers
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .errors import ConfigError, ConfigTypeError, config_error, describe, unknown_key_error

T = TypeVar("T")


class _Required:
    """Sentinel default: the key must be present."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: ``default=REQUIRED`` (the default of every reader): a missing key is an error.
REQUIRED: Any = _Required()
#: Largest integer a reader accepts unless told otherwise: every int up to it is exact in
#: float64, and no count or size of a real platform comes near it.
MAX_INT = 2**53


@dataclass(frozen=True)
class Quantity:
    """The sane range of a physical quantity: ``minimum <= value <= maximum`` (``> 0``
    instead of ``>= minimum`` when ``positive``), in ``unit``."""

    unit: str
    minimum: float
    maximum: float
    positive: bool = False


#: Link and memory bandwidth in GB/s (ASTRA-sim's 2**30 or 1e9 bytes; the range covers both):
#: from 1 KB/s to 1 ZB/s (high enough to make a link or a memory "free" in a study).
BANDWIDTH_GBPS = Quantity("GB/s", 1e-6, 1e12, positive=True)
#: Latencies and per-message delays in ns: up to 1000 s.
LATENCY_NS = Quantity("ns", 0.0, 1e12)
#: Duration of one op in ns: up to 1e20 (three thousand years: far beyond any run, far below
#: where sums of millions of them lose their meaning).
DURATION_NS = Quantity("ns", 0.0, 1e20)
#: Sizes in bytes: up to 2**53 (8 PiB), exact in float64.
SIZE_BYTES = Quantity("bytes", 0.0, float(MAX_INT))
#: Floating-point operations of one op: up to 1e30 (its time stays finite at any sane peak).
FLOPS = Quantity("FLOPs", 0.0, 1e30)
#: A dimensionless factor (scale, ratio): from 1e-9 to 1e9.
FACTOR = Quantity("", 1e-9, 1e9, positive=True)


# ------------------------------------------------------------------------------ one value
def as_int(value: Any, *, source: str | None, key: str, minimum: int | None = None,
           maximum: int | None = MAX_INT) -> int:
    """``value`` as an int within ``[minimum, maximum]`` (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise config_error(source, key, _int_expected(minimum, maximum), value,
                           cls=ConfigTypeError)
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif math.isfinite(value) and float(value).is_integer():
        number = int(value)  # type: ignore[call-overload]  # typeshed: Real lacks __int__
    else:
        raise config_error(source, key, _int_expected(minimum, maximum), value)
    if minimum is not None and number < minimum:
        raise config_error(source, key, _int_expected(minimum, maximum), value)
    if maximum is not None and number > maximum:
        raise config_error(source, key, _int_expected(minimum, maximum, too_large=True), value)
    return number


def as_number(value: Any, *, source: str | None, key: str, minimum: float | None = None,
              maximum: float | None = None, positive: bool = False,
              quantity: Quantity | None = None, text: bool = False) -> float:
    """``value`` as a finite float within its range.

    Parameters
    ----------
    minimum, maximum : float, optional
        Inclusive bounds.
    positive : bool
        The value must be ``> 0`` (``minimum`` may add a smallest accepted value).
    quantity : Quantity, optional
        Takes the bounds (and unit, for the message) of a physical quantity.
    text : bool
        Also accept a string holding a decimal number (``"1e12"``: YAML 1.1 reads an
        exponent without a dot as text).
    """
    unit = ""
    if quantity is not None:
        unit, minimum, maximum = quantity.unit, quantity.minimum, quantity.maximum
        positive = quantity.positive
    expected = _number_expected(minimum, maximum, positive, unit)
    if text and isinstance(value, str):
        try:
            value = float(value) if _DECIMAL.match(value) else value
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise config_error(source, key, expected, value, cls=ConfigTypeError)
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise config_error(source, key, expected, value) from None
    if (not math.isfinite(number) or (positive and number <= 0)
            or (minimum is not None and number < minimum)
            or (maximum is not None and number > maximum)):
        raise config_error(source, key, expected, value)
    return number


def as_bool(value: Any, *, source: str | None, key: str, zero_one: bool = False) -> bool:
    """``value`` as a bool: ``True``/``False`` only, or with ``zero_one`` also ASTRA-sim's
    ``0``/``1`` (ints or the strings ``"0"``/``"1"``)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if zero_one and not isinstance(value, float) and (
            (isinstance(value, numbers.Integral) and value in (0, 1))
            or (isinstance(value, str) and value.strip() in ("0", "1"))):
        return int(value) == 1
    expected = "true or false" + (" (or 0 / 1)" if zero_one else "")
    raise config_error(source, key, expected, value,
                       cls=_error_class(value, (str, numbers.Number)))


def as_choice(value: Any, choices: Any, *, source: str | None, key: str,
              case_insensitive: bool = False) -> Any:
    """``value`` as one of ``choices``: a tuple or ``Literal`` type of strings (returns the
    declared spelling), or a mapping of accepted spellings to what each means (returns the
    meaning). ``case_insensitive`` accepts any letter case."""
    table = _choice_table(choices)
    spelled = ", ".join(str(c) for c in table)
    expected = "one of " + spelled
    if not isinstance(value, str):
        raise config_error(source, key, expected, value,
                           cls=_error_class(value, (numbers.Number, type(None))))
    if value in table:
        return table[value]
    if case_insensitive:
        for spelling, meaning in table.items():
            if spelling.lower() == value.strip().lower():
                return meaning
    raise config_error(source, key, expected, value)


def as_str(value: Any, *, source: str | None, key: str, nonempty: bool = True,
           max_length: int = 4096) -> str:
    """``value`` as a string (non-empty unless told otherwise, at most ``max_length``)."""
    expected = "a non-empty string" if nonempty else "a string"
    if not isinstance(value, str):
        raise config_error(source, key, expected, value, cls=ConfigTypeError)
    if (nonempty and not value) or len(value) > max_length:
        raise config_error(source, key, f"{expected} of at most {max_length} characters",
                           value)
    return value


def as_list(value: Any, item: Callable[..., T] | None = None, *, source: str | None,
            key: str, min_length: int = 0, max_length: int = 1 << 20,
            scalar: bool = False, what: str = "a list") -> list[T]:
    """``value`` as a list of items each checked by ``item(value, source=, key=)``.

    ``scalar=True`` accepts a single value for a one-item list. ``what`` describes the list
    in messages (``"a list of NPU ids"``).
    """
    if scalar and not isinstance(value, (list, tuple)):
        value = [value]
    limits = _length_text(min_length, max_length)
    if not isinstance(value, (list, tuple)):
        raise config_error(source, key, what + limits, value, cls=ConfigTypeError)
    if not min_length <= len(value) <= max_length:
        raise config_error(source, key, what + limits, value)
    if item is None:
        return list(value)
    return [item(v, source=source, key=f"{key}[{i}]") for i, v in enumerate(value)]


def as_mapping(value: Any, *, source: str | None, key: str,
               what: str = "a mapping of keys to values") -> Mapping[str, Any]:
    """``value`` as a mapping."""
    if not isinstance(value, Mapping):
        raise config_error(source, key, what, value, cls=ConfigTypeError)
    return value


def as_config(data: Any, *, source: str | None, what: str) -> Mapping[str, Any]:
    """The top level of a config: a mapping (``what`` names its kind, e.g. "network")."""
    if not isinstance(data, Mapping):
        where = f"{source}: " if source else ""
        raise ConfigTypeError(f"{where}expected a mapping of {what} keys to values, found "
                              f"{describe(data)}")
    return data


def as_text(text: Any, *, source: str | None, what: str) -> str:
    """The content of a line-based config file: a string."""
    if not isinstance(text, str):
        where = f"{source}: " if source else ""
        raise ConfigTypeError(f"{where}expected the text of a {what}, found {describe(text)}")
    return text


# ----------------------------------------------------------------------- from a mapping
def _missing(key: str, default: Any, source: str | None, prefix: str, expected: str) -> Any:
    """``default`` for an absent key, or the missing-key error when it is required."""
    if default is REQUIRED:
        raise config_error(source, prefix + key, expected, ...)
    return default


def read_int(data: Mapping[str, Any], key: str, *, source: str | None,
             default: Any = REQUIRED, minimum: int | None = None,
             maximum: int | None = MAX_INT, prefix: str = "") -> int:
    """The integer under ``key`` (see :func:`as_int`); ``default`` is returned as it is."""
    if key not in data:
        return _missing(key, default, source, prefix, _int_expected(minimum, maximum))
    value = data[key]
    return as_int(value, source=source, key=prefix + key, minimum=minimum, maximum=maximum)


def read_number(data: Mapping[str, Any], key: str, *, source: str | None,
                default: Any = REQUIRED, minimum: float | None = None,
                maximum: float | None = None, positive: bool = False,
                quantity: Quantity | None = None, prefix: str = "") -> float:
    """The number under ``key`` (see :func:`as_number`); ``default`` is returned as it is."""
    expected = _number_expected(minimum, maximum, positive, "") if quantity is None else \
        _number_expected(quantity.minimum, quantity.maximum, quantity.positive, quantity.unit)
    if key not in data:
        return _missing(key, default, source, prefix, expected)
    value = data[key]
    return as_number(value, source=source, key=prefix + key, minimum=minimum,
                     maximum=maximum, positive=positive, quantity=quantity)


def read_bool(data: Mapping[str, Any], key: str, *, source: str | None,
              default: Any = REQUIRED, zero_one: bool = False, prefix: str = "") -> bool:
    """The boolean under ``key`` (see :func:`as_bool`)."""
    if key not in data:
        return _missing(key, default, source, prefix, "true or false")
    value = data[key]
    return as_bool(value, source=source, key=prefix + key, zero_one=zero_one)


def read_choice(data: Mapping[str, Any], key: str, choices: Any, *, source: str | None,
                default: Any = REQUIRED, case_insensitive: bool = False,
                prefix: str = "") -> Any:
    """The choice under ``key`` (see :func:`as_choice`); ``default`` is returned as it is."""
    if key not in data:
        return _missing(key, default, source, prefix,
                        "one of " + ", ".join(str(c) for c in _choice_table(choices)))
    value = data[key]
    return as_choice(value, choices, source=source, key=prefix + key,
                     case_insensitive=case_insensitive)


def read_str(data: Mapping[str, Any], key: str, *, source: str | None,
             default: Any = REQUIRED, nonempty: bool = True, max_length: int = 4096,
             prefix: str = "") -> str:
    """The string under ``key`` (see :func:`as_str`)."""
    if key not in data:
        return _missing(key, default, source, prefix, "a string")
    value = data[key]
    return as_str(value, source=source, key=prefix + key, nonempty=nonempty,
                  max_length=max_length)


def read_list(data: Mapping[str, Any], key: str, item: Callable[..., T] | None = None, *,
              source: str | None, default: Any = REQUIRED, min_length: int = 0,
              max_length: int = 1 << 20, scalar: bool = False, what: str = "a list",
              prefix: str = "") -> list[T]:
    """The list under ``key``, every item checked by ``item`` (see :func:`as_list`)."""
    if key not in data:
        return _missing(key, default, source, prefix, what)
    value = data[key]
    return as_list(value, item, source=source, key=prefix + key, min_length=min_length,
                   max_length=max_length, scalar=scalar, what=what)


def read_mapping(data: Mapping[str, Any], key: str, *, source: str | None,
                 default: Any = REQUIRED, what: str = "a mapping of keys to values",
                 prefix: str = "") -> Mapping[str, Any]:
    """The mapping under ``key`` (``None`` written in the file counts as absent)."""
    if key not in data or (data[key] is None and default is not REQUIRED):
        return _missing(key, default, source, prefix, what)
    return as_mapping(data[key], source=source, key=prefix + key, what=what)


def check_unknown_keys(data: Mapping[Any, Any], known: Iterable[str], *,
                       source: str | None, prefix: str = "") -> None:
    """Raise the uniform unknown-key error for the first key of ``data`` (in sorted order)
    that is not in ``known``; keys that are not strings are unknown too."""
    known = set(known)
    unknown = sorted((k for k in data if not (isinstance(k, str) and k in known)), key=str)
    if unknown:
        raise unknown_key_error(source, f"{prefix}{unknown[0]}", [prefix + k for k in known])


def unknown_keys(data: Mapping[Any, Any], known: Iterable[str]) -> list[str]:
    """Keys of ``data`` not in ``known`` (as text, in file order), for formats that warn
    about them instead of refusing them."""
    known = set(known)
    return [str(k) for k in data if not (isinstance(k, str) and k in known)]


# ------------------------------------------------------------------------------ helpers
def choices_of(literal: Any) -> tuple[Any, ...]:
    """The strings of a ``Literal[...]`` type, in declaration order (typed ``Any``: the caller
    declares the tuple of that ``Literal`` it gets)."""
    return tuple(typing.get_args(literal))


def _error_class(value: Any, same_kind: tuple[type, ...]) -> type[ConfigError]:
    """:class:`ConfigTypeError` unless ``value`` is of a kind the reader could have taken
    (then a plain ``ConfigError``: the value, not its type, is wrong)."""
    return ConfigError if isinstance(value, same_kind) else ConfigTypeError


def _choice_table(choices: Any) -> dict[str, Any]:
    if isinstance(choices, Mapping):
        return dict(choices)
    names = typing.get_args(choices) or tuple(choices)
    return {name: name for name in names}


def _int_expected(minimum: int | None, maximum: int | None, too_large: bool = False) -> str:
    """``"an integer >= 1"``; the maximum is named when it is not the generic
    :data:`MAX_INT`, or when the value exceeds it."""
    text = "an integer" if minimum is None else f"an integer >= {minimum}"
    if maximum is not None and (maximum != MAX_INT or too_large):
        text += f" (at most {maximum})"
    return text


def _number_expected(minimum: float | None, maximum: float | None, positive: bool,
                     unit: str) -> str:
    if positive and not minimum and maximum is not None:
        text = f"a number in (0, {maximum:g}]"
        return f"{text} ({unit})" if unit else text
    if positive:
        text = "a number > 0"
    elif minimum is not None:
        text = f"a number >= {minimum:g}"
    else:
        text = "a finite number"
    limits = []
    if positive and minimum:
        limits.append(f"at least {minimum:g}")
    if maximum is not None:
        limits.append(f"at most {maximum:g}")
    detail = ", ".join(part for part in (unit, " and ".join(limits)) if part)
    return f"{text} ({detail})" if detail else text


def _length_text(min_length: int, max_length: int) -> str:
    if min_length and max_length < 1 << 20:
        return f" of {min_length} to {max_length} items"
    if min_length:
        return " (not empty)" if min_length == 1 else f" of at least {min_length} items"
    return f" of at most {max_length} items" if max_length < 1 << 20 else ""


_DECIMAL = re.compile(r"^\s*[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*$")
