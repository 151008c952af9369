"""The two network models, by name (see :mod:`flowsim.network.engine`).

Imports nothing heavy: the command line's parser lists the models without loading numpy.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Congestion-unaware (ASTRA-sim's analytical backend) or max-min fair flow model.
NetworkModel = Literal["analytical", "flow"]
MODELS: tuple[NetworkModel, ...] = get_args(NetworkModel)


def check_model(model: object, *, source: str = "argument", key: str = "model") -> str:
    """Validate a network model name."""
    from .._validate import as_choice

    return as_choice(model, MODELS, source=source, key=key)
