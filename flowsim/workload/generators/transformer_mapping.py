"""Mapping the tensor-, data- and pipeline-parallel groups of a transformer onto network
dimensions (see :mod:`.transformer`, "Mapping onto the network")."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ...errors import ConfigError, config_error
from .transformer_spec import PARALLELISMS, TransformerSpec, _where


def parallel_dims(network: Any, spec: TransformerSpec) -> dict[str, tuple[int, ...]]:
    """The network dims of each parallelism (``()`` for a degree of 1).

    Raises
    ------
    ConfigError
        ``tp * dp * pp`` differs from the network's NPUs, or a degree is not the product of
        whole (by default: consecutive) dims; the message suggests a network shape.
    """
    sizes = tuple(int(p) for p in network.dims)
    degree = {"tp": spec.tp, "dp": spec.dp, "pp": spec.pp}
    shape = [degree[p] for p in PARALLELISMS if degree[p] > 1] or [1]
    if spec.tp * spec.dp * spec.pp != network.npus:
        raise ConfigError(
            f"{_where(spec.source)}tp * dp * pp = {spec.tp} * {spec.dp} * {spec.pp} = "
            f"{spec.tp * spec.dp * spec.pp} NPUs, but the network has {network.npus} "
            f"(npus_count: {list(sizes)})")
    if spec.dims is not None:
        for name, dims in spec.dims:
            bad = [d for d in dims if d >= len(sizes)]
            if bad:
                raise config_error(spec.source, f"dims.{name}",
                                   f"network dim indices 0..{len(sizes) - 1}", list(dims))
            got = math.prod(sizes[d] for d in dims)
            if got != degree[name]:
                raise config_error(spec.source, f"dims.{name}",
                                   f"dims whose sizes multiply to {name}={degree[name]} "
                                   f"(the network's dims are {list(sizes)}; these multiply "
                                   f"to {got})", list(dims))
        return dict(spec.dims)
    out: dict[str, tuple[int, ...]] = {}
    d = 0
    for name in PARALLELISMS:
        start, got = d, 1
        while got < degree[name] and d < len(sizes):
            got *= sizes[d]
            d += 1
        if got != degree[name]:
            explicit = _some_assignment(sizes, degree)
            hint = "" if explicit is None else ", or give the dims explicitly: dims: {" + \
                ", ".join(f"{p}: {list(explicit[p])}" for p in PARALLELISMS if explicit[p]) \
                + "}"
            raise config_error(
                spec.source, name,
                f"a product of whole consecutive network dims from dim {start} on "
                f"(tensor parallelism takes the innermost dims of npus_count {list(sizes)}, "
                f"then data parallelism, then pipeline parallelism); use a network shaped "
                f"like npus_count: {shape}{hint}", degree[name])
        out[name] = tuple(range(start, d))
    return out


def _some_assignment(sizes: tuple[int, ...], degree: dict[str, int]
                     ) -> dict[str, tuple[int, ...]] | None:
    """Whole dims for every parallelism whose sizes multiply to its degree, if any (tried
    for networks of at most 8 dims)."""
    if len(sizes) > 8:
        return None
    for owners in itertools.product(PARALLELISMS, repeat=len(sizes)):
        dims: dict[str, tuple[int, ...]] = {p: tuple(d for d, o in enumerate(owners) if o == p)
                                            for p in PARALLELISMS}
        if all(math.prod(sizes[d] for d in dims[p]) == degree[p] for p in PARALLELISMS):
            return dims
    return None


def _stages(network: Any, pp_dims: tuple[int, ...], pp: int
            ) -> tuple[list[np.ndarray], list[int]]:
    """NPUs of every stage, and the id offset from each stage to the next."""
    coords = network.coords(np.arange(network.npus, dtype=np.int64))
    stage = np.zeros(network.npus, np.int64)
    scale = 1
    for d in pp_dims:
        stage += coords[:, d] * scale
        scale *= int(network.dims[d])
    npus = [np.flatnonzero(stage == s) for s in range(pp)]
    # The lowest id of a stage has every other coordinate 0, so the difference of the lowest
    # ids is the offset of every NPU of the stage (ids are linear in the coordinates).
    offsets = [int(npus[s + 1][0] - npus[s][0]) for s in range(pp - 1)]
    return npus, offsets


