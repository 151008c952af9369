"""One pipeline stage's op list and its compute stream: the primitives
:class:`~.transformer_passes.PassBuilder` builds layer passes from.

A compute op waits for the previous one (one compute stream per NPU) and for the ops whose
data it needs; a collective waits for the ops it is given. A kernel sequence with
tensor-parallel :class:`~.transformer_shapes.Exchange` entries inside (a LoRA adapter's
all-gathers and all-reduces) becomes compute ops with those collectives between them, each
compute op after a collective waiting for it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..graph import Op
from ..kernels import HostCopy, Kernel
from .transformer_overlap import Frontier
from .transformer_shapes import Exchange, has_exchange

#: a kernels tuple's shared copy, its FLOPs and bytes, and its pieces between exchanges
#: (None: no exchange inside)
Interned = tuple[tuple[Kernel, ...], float, float, tuple[tuple[Kernel, ...] | Exchange, ...] | None]


class OpStream:
    """Appends ops to one stage's op list, compute ops in stream order."""

    def __init__(self, tp_dims: tuple[int, ...]) -> None:
        self.tp_dims = tp_dims   # the group of :class:`Exchange` collectives
        self.ops: list[Op] = []
        self.last: int | None = None     # the last compute op (stream order)
        self.last_wgrad: int | None = None   # the last weight-gradient op
        #: a zero-bubble backward's held weight gradients and what waits for them (None:
        #: none held; :mod:`.transformer_zero_bubble`)
        self.store: list[Callable[[], object]] | None = None
        #: kernels tuple -> :data:`Interned`; and by id of the shared copy
        self._by_value: dict[tuple[Kernel, ...], Interned] = {}
        self._by_id: dict[int, Interned] = {}

    def add(self, **fields: Any) -> int:
        op_id = len(self.ops)
        self.ops.append(Op(id=op_id, **fields))
        return op_id

    def host_copy(self, name: str, nbytes: float, layer: int, pass_: str,
                  deps: Frontier) -> int:
        """A copy of ``nbytes`` between the GPU and host memory, on the NPU's host-copy
        resource beside the compute stream, after ``deps`` (activation offloading)."""
        return self.add(kind="compute", name=name, kernels=(HostCopy(nbytes),), host=True,
                        deps=tuple(dict.fromkeys(d for d in deps if d >= 0)), layer=layer,
                        pass_=pass_)

    def compute(self, name: str, kernels: tuple[Kernel, ...], layer: int, pass_: str,
                deps: Frontier = ()) -> int:
        """A compute op after the previous one on the stream, needing ``deps``' data (a
        weight gradient of a zero-bubble backward: held for later, -1); with exchanges
        inside ``kernels``, the last of its compute ops."""
        if pass_ == "wg" and self.store is not None:
            self.store.append(partial(self.compute, name, kernels, layer, pass_, deps))
            return -1
        kernels, flops, mem_bytes, pieces = self._interned(kernels)
        if pieces is not None:
            return self._exchanged(name, pieces, layer, pass_, deps)
        last = self.last
        # built here, not through add(): a 16K-GPU iteration makes 26 K of them
        self.last = op_id = len(self.ops)
        self.ops.append(Op(op_id, "compute", name, kernels=kernels, flops=flops,
                           mem_bytes=mem_bytes, deps=tuple(d for d in deps if d != last),
                           ctrl_deps=() if last is None else (last,), layer=layer,
                           pass_=pass_))
        if pass_ == "wg":
            self.last_wgrad = self.last
        return self.last

    def _exchanged(self, name: str, pieces: tuple[tuple[Kernel, ...] | Exchange, ...],
                   layer: int, pass_: str, deps: Frontier) -> int:
        """The compute ops of a sequence's pieces, each exchange a collective of the
        compute op before it that the next one waits for."""
        op, x = -1, deps
        for i, piece in enumerate(pieces):
            if isinstance(piece, Exchange):
                x = (self.collective(f"{name}.{piece.name}.{piece.collective}",
                                     piece.collective, piece.size, self.tp_dims, layer,
                                     pass_, (op,)),)
            else:
                op = self.compute(name if i == 0 else f"{name}.{i}", piece, layer, pass_, x)
                x = ()
        return op

    def after_wgrad(self, action: Callable[[], object]) -> None:
        """``action`` (reading :attr:`last_wgrad` or :attr:`last`) now, or after the held
        weight gradients."""
        if self.store is None:
            action()
        else:
            self.store.append(action)

    def _interned(self, kernels: tuple[Kernel, ...]) -> Interned:
        """One shared tuple per distinct kernels tuple, with its FLOPs and bytes summed once:
        the ops of every micro-batch then share it (and compute models price it once)."""
        hit = self._by_id.get(id(kernels))   # a shared tuple (kept alive, so its id is its)
        if hit is None:
            hit = self._by_value.get(kernels)   # a fresh concatenation: hashed
            if hit is None:
                hit = self._by_value[kernels] = (kernels, sum(k.flops for k in kernels),
                                                 sum(k.bytes for k in kernels),
                                                 _pieces(kernels))
                self._by_id[id(kernels)] = hit
        return hit

    def collective(self, name: str, collective: str, size: int, dims: tuple[int, ...],
                   layer: int, pass_: str, deps: Frontier) -> int:
        op_id = len(self.ops)
        self.ops.append(Op(op_id, "collective", name, collective=collective, size=int(size),
                           dims=dims, deps=deps, layer=layer, pass_=pass_))
        return op_id


def _pieces(kernels: tuple[Kernel, ...]) -> tuple[tuple[Kernel, ...] | Exchange, ...] | None:
    """``kernels`` cut at its exchanges (None: it has none). A sequence starts and ends with
    kernels: an exchange's result is what the kernels after it read."""
    if not has_exchange(kernels):
        return None
    pieces: list[tuple[Kernel, ...] | Exchange] = []
    run: list[Kernel] = []
    for k in kernels:
        if isinstance(k, Exchange):
            pieces += [tuple(run), k]
            run = []
        else:
            run.append(k)
    return (*pieces, tuple(run))
