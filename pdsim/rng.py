"""Named random streams derived from one seed.

Every consumer of randomness asks for a stream by name (``arrivals``, ``lengths``,
``acceptance``, ``routing``, ``faults``, ...). Each stream is seeded from a
``SeedSequence`` keyed by the run seed and a stable hash of the stream name, so changing
how one component draws (a different router, say) never shifts another component's
numbers: comparisons between configurations are paired.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stream_key(name: str) -> int:
    """Stable 64-bit key of a stream name (independent of PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class RandomStreams:
    """Factory of independent, reproducible numpy generators keyed by name."""

    __slots__ = ("_cache", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._cache: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        """The generator of stream ``name``; the same object on every call."""
        gen = self._cache.get(name)
        if gen is None:
            seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(stream_key(name),))
            gen = np.random.Generator(np.random.PCG64(seq))
            self._cache[name] = gen
        return gen

    def key(self, name: str) -> int:
        """A 64-bit key of stream ``name`` for counter-based draws (``counter_uniforms``)."""
        seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(stream_key(name),))
        return int(seq.generate_state(1, dtype=np.uint64)[0])

    def fresh(self, name: str) -> np.random.Generator:
        """A new generator of stream ``name`` positioned at its start."""
        seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(stream_key(name),))
        return np.random.Generator(np.random.PCG64(seq))


class UniformBuffer:
    """A stream's uniforms in [0, 1) handed out in order, drawn from its generator in
    blocks: the same values in the same order as one ``random()`` call at a time, for a
    consumer that takes a few per event. The buffer must be the generator's only user."""

    __slots__ = ("_block", "_buf", "_gen", "_pos")

    def __init__(self, gen: np.random.Generator, block: int = 4096) -> None:
        self._gen = gen
        self._block = block
        self._buf: list[float] = []
        self._pos = 0

    def take(self, n: int) -> list[float]:
        """The next ``n`` uniforms."""
        end = self._pos + n
        if end > len(self._buf):
            self._buf = self._buf[self._pos:] + self._gen.random(max(self._block, n)).tolist()
            self._pos, end = 0, n
        out = self._buf[self._pos:end]
        self._pos = end
        return out


# ----------------------------------------------------------- counter-based draws

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's Weyl increment (2^64 / golden ratio)
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def splitmix64(x: int) -> int:
    """SplitMix64's finalizer of a 64-bit integer (a bijection with full avalanche)."""
    z = x & _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def counter_key(stream: int, index: int) -> int:
    """The 64-bit key of item ``index`` (a request id, say) of a keyed stream."""
    return splitmix64((stream + (index + 1) * _GAMMA) & _MASK64)


def counter_uniforms(keys: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) that depend only on (key, counter): draw ``counter`` of the
    item with ``key`` is the ``counter``-th output of SplitMix64 seeded with ``key``.

    ``keys`` and ``counters`` broadcast against each other (uint64 / int64 arrays). No
    state is consumed, so who draws first, or how draws are batched, never changes a
    value: each request's acceptance sequence is the same in a decode run and step by
    step, and across configurations that schedule it differently (paired comparisons).
    """
    z = counters.astype(np.uint64) + np.uint64(1)
    z *= np.uint64(_GAMMA)
    return _finalize(z + keys)


def counter_uniform_steps(keys: np.ndarray, counters: np.ndarray, steps: int) -> np.ndarray:
    """``counter_uniforms(keys, counters + j)`` for j = 0..steps-1, as a (steps, k) array
    (the Weyl sequence is advanced by addition, one row per step)."""
    base = counters.astype(np.uint64) + np.uint64(1)
    base *= np.uint64(_GAMMA)
    base += keys
    return _finalize(base[None, :] + _step_gammas(steps)[:, None])


def counter_uniform_run(key: int, counter: int, steps: int) -> np.ndarray:
    """``counter_uniforms`` of one item at counters ``counter .. counter + steps - 1``, as a
    1-D array: the same values as ``counter_uniform_steps`` for a single key, with the
    Weyl state of the first draw computed on Python ints (a per-request draw's cost is
    its number of array operations, not its length)."""
    first = (key + (counter + 1) * _GAMMA) & _MASK64
    return _finalize(_step_gammas(steps) + np.uint64(first))


def counter_uniform_rows(keys: np.ndarray, steps: int) -> np.ndarray:
    """``counter_uniforms(keys[i], j)`` for j = 0..steps-1 as row i of a (k, steps) array:
    each item's first ``steps`` draws, laid out item by item."""
    first = keys + np.uint64(_GAMMA)  # the Weyl state of draw 0 (wraps mod 2^64)
    return _finalize(first[:, None] + _step_gammas(steps)[None, :])


def counter_keys(stream: int, indices: np.ndarray) -> np.ndarray:
    """``counter_key(stream, i)`` for each ``i`` of an int array (uint64 keys)."""
    z = indices.astype(np.uint64) + np.uint64(1)
    z *= np.uint64(_GAMMA)
    z += np.uint64(stream)
    return _mix64(z)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on a uint64 array, in place (``splitmix64`` elementwise)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


def _finalize(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a Weyl state array (in place), as [0, 1) floats."""
    _mix64(z)
    z >>= np.uint64(11)
    u: np.ndarray = z.astype(np.float64)
    u *= 2.0 ** -53
    return u


def _step_gammas(steps: int) -> np.ndarray:
    """The Weyl increments of draws 0..steps-1 after a first one (j * gamma, mod 2^64)."""
    if steps <= len(_STEP_GAMMA):
        return _STEP_GAMMA[:steps]
    return np.arange(steps, dtype=np.uint64) * np.uint64(_GAMMA)


_STEP_GAMMA = np.arange(256, dtype=np.uint64) * np.uint64(_GAMMA)
