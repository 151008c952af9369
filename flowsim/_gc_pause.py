"""Python's cyclic garbage collector paused while a simulation builds and runs.

A run allocates millions of small objects that live until it ends (ops, their tuples, the
engine's per-op times) and almost no reference cycles. The collector's generational
heuristics still traverse every live object again and again as their number grows: on a
2.7 M-op pipeline workload that was over half of building, checking and preparing it. Paused,
the objects are freed by reference counting as before. A run must leave no reference cycles
(callbacks between its parts are weak: :mod:`flowsim._weak`; ``tests/test_reference_cycles.py``):
what a cycle holds waits for a full collection, which a loop of runs may not trigger for long.

When it resumes, everything the run allocated is still in the youngest generation, and the
first collection after it would traverse all of it at once (30 ms for a 16,384-GPU
iteration's 51,000 ops): the objects are moved to the oldest generation instead
(``gc.freeze`` then ``gc.unfreeze``, each a list splice), where only full collections visit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (nested blocks and a collector the
    caller disabled are left as they are)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():   # (never thaw what the caller froze: a pre-fork server)
            gc.freeze()     # every tracked object to the permanent generation...
            gc.unfreeze()   # ...and back into the oldest one
        gc.enable()
