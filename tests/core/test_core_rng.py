"""Named streams hand out the values their consumers would draw one at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.rng import RandomStreams, UniformBuffer


@settings(max_examples=50, deadline=None)
@given(takes=st.lists(st.integers(0, 40), max_size=60), block=st.integers(1, 64),
       seed=st.integers(0, 2**32))
def test_uniform_buffer_gives_the_stream_one_draw_at_a_time(
        takes: list[int], block: int, seed: int) -> None:
    """Drawing in blocks never changes a value or its order: the provenance draws are the
    same whatever the block size, and the same as ``random()`` per guessed slot."""
    buf = UniformBuffer(RandomStreams(seed).get("provenance"), block=block)
    one_by_one = RandomStreams(seed).get("provenance")
    for n in takes:
        got = buf.take(n)
        assert got == [one_by_one.random() for _ in range(n)]
        assert all(isinstance(x, float) for x in got)


def test_uniform_buffer_values_are_uniform() -> None:
    buf = UniformBuffer(np.random.default_rng(3), block=100)
    u = np.array([x for _ in range(500) for x in buf.take(7)])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.02  # 3500 draws: sd of the mean ~0.005
