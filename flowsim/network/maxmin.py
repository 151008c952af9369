"""Max-min fair rates: the validated public face of the jitted kernel, and a readable
plain-numpy reference used as the test oracle."""

from __future__ import annotations

import numpy as np

from ..errors import FlowSetError, public_api
from . import _maxmin_kernels

#: the multiplicities of a flow set where no flow stands for copies
NO_COPIES = np.zeros(0, np.float64)


class MaxMinWorkspace:
    """Buffers reused by repeated max-min solves on one set of links (no allocation per call)."""

    def __init__(self, num_links: int, num_flows: int, num_incidences: int) -> None:
        self.resize(num_links, num_flows, num_incidences)

    def resize(self, num_links: int, num_flows: int, num_incidences: int) -> None:
        L = max(num_links, 1)
        self.num_links = num_links
        self.cap = np.zeros(L, np.float64)
        self.unfrozen = np.zeros(L, np.float64)
        self.start = np.zeros(L, np.int64)
        self.fill = np.zeros(L, np.int64)
        self.touched = np.zeros(L, np.int64)
        self.frozen = np.zeros(max(num_flows, 1), np.uint8)
        self.flows = np.zeros(max(num_incidences, 1), np.int64)
        # the heap holds every touched link at most once (a re-queued link was popped first)
        self.hkeys = np.zeros(L, np.float64)
        self.hids = np.zeros(L, np.int64)
        self.htags = np.zeros(L, np.int64)

    def ensure(self, num_flows: int, num_incidences: int) -> None:
        """Grow the flow- and incidence-sized buffers (amortized doubling)."""
        if num_flows > self.frozen.size:
            self.frozen = np.zeros(max(num_flows, 2 * self.frozen.size), np.uint8)
        if num_incidences > self.flows.size:
            self.flows = np.zeros(max(num_incidences, 2 * self.flows.size), np.int64)

    def kernel_args(self) -> tuple:
        return (self.cap, self.unfrozen, self.start, self.fill, self.flows, self.touched,
                self.frozen, self.hkeys, self.hids, self.htags)


def validate_incidence(capacity: np.ndarray, indptr: np.ndarray, links: np.ndarray,
                       *, name: str = "maxmin_rates") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check and normalise a capacity vector and a CSR flow-link incidence."""
    capacity = np.ascontiguousarray(capacity, dtype=np.float64).ravel()
    indptr = np.ascontiguousarray(indptr, dtype=np.int64).ravel()
    links = np.ascontiguousarray(links, dtype=np.int32).ravel()
    if not np.all(np.isfinite(capacity)) or np.any(capacity <= 0):
        raise FlowSetError(f"{name}: capacity must be finite and > 0 on every link")
    if indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
            or indptr[-1] != links.size:
        raise FlowSetError(f"{name}: indptr must start at 0, never decrease and end at "
                           f"len(links) = {links.size}")
    if links.size and (links.min() < 0 or links.max() >= capacity.size):
        raise FlowSetError(f"{name}: link ids must be in 0..{capacity.size - 1}")
    return capacity, indptr, links


@public_api
def maxmin_rates(capacity: np.ndarray, indptr: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Max-min fair rate of every flow.

    Parameters
    ----------
    capacity : array_like of float, shape (L,)
        Capacity of every link (any rate unit, e.g. bytes/ns), > 0.
    indptr : array_like of int, shape (F + 1,)
        CSR pointers: flow ``f`` crosses ``links[indptr[f]:indptr[f+1]]``.
    links : array_like of int, shape (indptr[-1],)
        Link ids. A flow may list a link at most once.

    Returns
    -------
    rates : ndarray of float64, shape (F,)
        No link carries more than its capacity, and every flow crosses a saturated link on
        which no other flow has a larger rate. A flow with no links gets ``inf``.

    Examples
    --------
    Two flows share link 0 (capacity 10); the second also crosses link 1 (capacity 2):

    >>> maxmin_rates([10.0, 2.0], [0, 1, 3], [0, 0, 1])
    array([8., 2.])
    """
    capacity, indptr, links = validate_incidence(capacity, indptr, links)
    n_flows = indptr.size - 1
    rates = np.zeros(n_flows, np.float64)
    ws = MaxMinWorkspace(capacity.size, n_flows, links.size)
    active = np.arange(n_flows, dtype=np.int64)
    _maxmin_kernels.maxmin_active(capacity, indptr, links, NO_COPIES, active, n_flows, rates,
                           *ws.kernel_args())
    return rates


def maxmin_rates_reference(capacity: np.ndarray, indptr: np.ndarray,
                           links: np.ndarray) -> np.ndarray:
    """Textbook progressive filling in plain numpy: the slow, readable oracle.

    All unfrozen flows grow at the same speed; when a link fills up, the flows crossing it
    freeze at the current level. Repeat until every flow is frozen.
    """
    capacity, indptr, links = validate_incidence(capacity, indptr, links,
                                                 name="maxmin_rates_reference")
    n_flows = indptr.size - 1
    flow_of = np.repeat(np.arange(n_flows), np.diff(indptr))
    rates = np.zeros(n_flows)
    frozen = np.diff(indptr) == 0
    rates[frozen] = np.inf
    level = 0.0
    while not frozen.all():
        live = ~frozen[flow_of]
        users = np.bincount(links[live], minlength=capacity.size)
        used = np.bincount(links, weights=np.where(frozen[flow_of], rates[flow_of], 0.0),
                           minlength=capacity.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            headroom = np.where(users > 0, (capacity - used) / users, np.inf)
        level = max(level, headroom.min())
        saturated = np.isclose(headroom, headroom.min(), rtol=1e-12, atol=0.0) & (users > 0)
        newly = np.zeros(n_flows, bool)
        newly[flow_of[live & saturated[links]]] = True
        rates[newly] = level
        frozen |= newly
    return rates
