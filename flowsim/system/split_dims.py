"""A system config's per-dimension algorithm lists on a network whose dimensions a workload
split (ASTRA-sim 1.0's ``break_dimension``).

A ``HYBRID_TRANSFORMER`` whose model-parallel group ends inside a physical dimension runs on
that dimension split in two logical ones (:func:`~flowsim.workload.training_loops.
model_parallel_split`). ASTRA-sim 1.0 then clones the split dimension's entry of every
algorithm list (``Sys.cc``, ``break_dimension``): a list written with one entry per *physical*
dimension is accepted, and the split dimension's algorithm serves both halves. flowsim does
the same here, for any number of splits.
"""

from __future__ import annotations

from dataclasses import replace

from ..collectives import FLAT_PREFIX
from ..errors import ConfigError
from .config import SystemConfig


def physical_of(physical: tuple[int, ...], logical: tuple[int, ...], source: str
                ) -> list[int]:
    """For each logical dimension, the physical dimension it is part of (logical dimensions
    are consecutive factors of the physical sizes, lowest first)."""
    out: list[int] = []
    k = 0
    for d, size in enumerate(physical):
        product, first = 1, True
        while first or product < size:
            if k >= len(logical):
                raise ConfigError(f"{source}: logical dimensions {list(logical)} do not split "
                                  f"the network's {list(physical)}")
            product *= logical[k]
            out.append(d)
            k, first = k + 1, False
        if product != size:
            raise ConfigError(f"{source}: logical dimensions {list(logical)} do not split "
                              f"the network's {list(physical)}")
    if k != len(logical):
        raise ConfigError(f"{source}: logical dimensions {list(logical)} do not split the "
                          f"network's {list(physical)}")
    return out


def logical_system(system: SystemConfig, physical: tuple[int, ...],
                   logical: tuple[int, ...],
                   parents: tuple[int, ...] | None = None) -> SystemConfig:
    """``system`` with every algorithm list of one entry per physical dimension turned into
    one entry per logical dimension (the split dimension's entry serving its parts); lists
    already of the logical length, and a single flat ``one*`` algorithm, stay.
    ``parents`` gives each logical dimension's physical one where the logical dimensions are
    not consecutive factors of the physical ones (a
    :class:`~flowsim.topology.view.StraddlingView`)."""
    if len(physical) == len(logical):
        return system
    parent = list(parents) if parents is not None else \
        physical_of(physical, logical, system.source)
    changed = []
    for collective, names in system.implementations:
        flat = len(names) == 1 and names[0].startswith(FLAT_PREFIX)
        # a plain string already serves every dimension, however many (phases.py)
        if len(names) == len(physical) and not flat and \
                collective not in system.every_dimension:
            names = tuple(names[d] for d in parent)
        changed.append((collective, names))
    return replace(system, implementations=tuple(changed))
