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

    def fresh(self, name: str) -> np.random.Generator:
        """A new generator of stream ``name`` positioned at its start."""
        seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(stream_key(name),))
        return np.random.Generator(np.random.PCG64(seq))
