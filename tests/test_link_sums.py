"""``sparse_link_sums``: per-link counts and weight sums on the links named, equal bit for
bit to ``np.bincount`` over every link, through either of its two ways of counting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim._arrays import sparse_link_sums


@settings(max_examples=200, deadline=None)
@given(data=st.data(), num_links=st.sampled_from([1, 7, 64, 5000]))
def test_same_as_bincount_over_every_link(data, num_links):
    # 5,000 links with fewer than 313 entries take the sorted way, the rest count every link
    n = data.draw(st.integers(0, 600))
    links = np.array(data.draw(st.lists(st.integers(0, num_links - 1), min_size=n,
                                        max_size=n)), dtype=np.int32)
    weights = np.array(data.draw(st.lists(st.floats(0, 1e6, allow_subnormal=False),
                                          min_size=n, max_size=n)))
    ids, counts, sums = sparse_link_sums(links, weights, num_links)
    full_counts = np.bincount(links, minlength=num_links)
    full_sums = np.bincount(links, weights=weights, minlength=num_links)
    assert ids.tolist() == np.flatnonzero(full_counts).tolist()
    assert counts.tolist() == full_counts[ids].tolist()
    assert sums.tobytes() == full_sums[ids].tobytes()

