"""Callbacks that do not keep their object alive.

The event-driven engines hand bound methods to their helpers (``schedule.when`` to the
phase DAGs, ``engine._complete`` to point-to-point matching), and a helper the object holds
that holds the object's method is a reference cycle: everything the object holds (a run's
ops, its per-NPU times) then waits for a full cyclic collection, which a loop of runs may
not trigger for a long time. A weak callback breaks the cycle at the cost of one dereference
per call. A helper that calls back many of its owner's methods (the transformer's pass
builder and its context-parallel and userbuffers helpers) holds a ``weakref.proxy`` of the
owner instead, the same idea for a whole object.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any


def weak_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` called through a weak reference to its object (a plain function as is)."""
    if not inspect.ismethod(method):
        return method
    ref = weakref.WeakMethod(method)
    name = method.__qualname__   # the name only: the bound method would hold its object

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()   # alive while its owner calls it: the owner holds the callee
        if bound is None:
            raise ReferenceError(f"{name}: its object no longer exists")
        return bound(*args, **kwargs)
    return call
