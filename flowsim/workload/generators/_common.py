"""Validation shared by the generators."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...errors import config_error, unknown_key_error


def check_keys(values: Mapping[str, Any], source: str, known: Iterable[str]) -> None:
    """Every key of ``values`` is one of ``known``, or a :class:`ConfigError` names it."""
    known = set(known)
    for key in values:
        if key not in known:
            raise unknown_key_error(source, str(key), known)


def positive_integer(value: Any, source: str, key: str) -> int:
    """``value`` as an int >= 1 (whole floats accepted), or a :class:`ConfigError`."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and (not math.isfinite(value) or value != int(value))) \
            or value < 1:
        raise config_error(source, key, "an integer >= 1", value)
    return int(value)
