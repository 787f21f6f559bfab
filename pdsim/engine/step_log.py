"""An instance's step log as the run writes it: rows in, columns grown in chunks.

A step (or a decode run's block of steps) is written as rows of the eight doubles of
``pdsim.facts.STEP_COLUMNS`` into a small buffer (a decode run's block is kept as the
array it came in, after the single rows before it); every ``FLUSH_ROWS`` rows the buffer
goes into the columns the run keeps (``record_steps``), each a numpy array grown in place
by chunks of half its size (at most ``MAX_CHUNK_ROWS``). ``columns()`` hands the arrays
over as the facts the results read, without a copy.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from pdsim.facts import COUNT_COLUMNS, STEP_COLUMNS, StepColumns, StepMode, start_gaps, to_counts

WIDTH = len(STEP_COLUMNS)
FLUSH_ROWS = 4096
FIRST_CHUNK_ROWS = 4096
MAX_CHUNK_ROWS = 1 << 20


class GrowingColumn:
    """A 1-d array that grows in chunks of half its size (at most ``MAX_CHUNK_ROWS``), in
    place: ``ndarray.resize`` reallocates, and for the large arrays of a long run the
    allocator moves the pages (``mremap``) instead of copying them, so growing never holds
    two copies. The room not yet written (zeroed by ``resize``) is trimmed off when the
    array is handed over."""

    __slots__ = ("_data", "_shared", "_used")

    def __init__(self, dtype: type[np.generic]) -> None:
        self._data = np.empty(FIRST_CHUNK_ROWS, dtype=dtype)
        self._used = 0
        self._shared = False  # handed out by ``joined``: never resized again

    def extend(self, values: np.ndarray) -> None:
        n = len(values)
        if self._data.dtype == np.uint16 and n and (values.min() < 0 or values.max() > 65535):
            self._widen()
        need = self._used + n
        if need > len(self._data):
            size = max(need, len(self._data) + min(len(self._data) // 2, MAX_CHUNK_ROWS))
            if self._shared:  # a copy: the arrays handed out stay as they are
                grown = np.empty(size, dtype=self._data.dtype)
                grown[:self._used] = self._data[:self._used]
                self._data, self._shared = grown, False
            else:
                self._data.resize(size, refcheck=False)
        self._data[self._used:need] = values
        self._used = need

    def _widen(self) -> None:
        """From 16-bit counts to 32-bit ones (a copy, once)."""
        wide = np.empty(len(self._data), dtype=np.int32)
        wide[:self._used] = self._data[:self._used]
        self._data, self._shared = wide, False

    def joined(self) -> np.ndarray:
        """Everything written, as one read-only array (no copy: the array is trimmed to
        its length; later writes go to a new one)."""
        if not self._shared:
            self._data.resize(self._used, refcheck=False)
            self._shared = True
        out = self._data[:self._used]
        out.flags.writeable = False
        return out


class StepLog:
    """One instance's per-step facts, written step by step or a block at a time."""

    __slots__ = ("_blocks", "_buf", "_counts", "_ends", "_flushed", "_gap_start_s",
                 "_gap_steps", "_last_end_s", "count", "mode")

    def __init__(self, mode: StepMode) -> None:
        self.mode = mode
        self.count = 0  # steps written
        self._buf = array("d")  # single rows not yet in the columns, after ``_blocks``
        self._blocks: list[np.ndarray] = []  # (rows x 8) blocks not yet in the columns
        self._flushed = 0
        self._ends = GrowingColumn(np.float64)
        # counts as 16-bit integers while they fit, 32-bit after
        self._counts = {name: GrowingColumn(np.uint16) for name in COUNT_COLUMNS[mode]}
        self._gap_steps: list[np.ndarray] = []
        self._gap_start_s: list[np.ndarray] = []
        self._last_end_s = math.nan

    def __len__(self) -> int:
        return self.count

    def add(self, start_s: float, end_s: float, prefill_tokens: int, decode_requests: int,
            kv_used_blocks: int, running: int, waiting: int, receiving: int) -> None:
        """One step's row."""
        self._buf.extend((start_s, end_s, prefill_tokens, decode_requests, kv_used_blocks,
                          running, waiting, receiving))
        self.count += 1
        if self.count - self._flushed >= FLUSH_ROWS:
            self._flush()

    def add_block(self, rows: np.ndarray) -> None:
        """Consecutive steps' rows, a ``(steps, 8)`` array of doubles, which the log keeps
        until it flushes (the caller does not write it again): no copy into the buffer."""
        if self._buf:  # the single rows before it go first
            self._blocks.append(np.array(self._buf, dtype=np.float64).reshape(-1, WIDTH))
            del self._buf[:]
        self._blocks.append(rows)
        self.count += len(rows)
        if self.count - self._flushed >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.count == self._flushed:
            return
        rows = np.array(self._buf, dtype=np.float64).reshape(-1, WIDTH)
        del self._buf[:]
        if self._blocks:
            rows = np.concatenate([*self._blocks, rows], dtype=np.float64)
            self._blocks.clear()
        end = rows[:, 1]
        gaps = start_gaps(rows[:, 0], end, self._last_end_s)
        if len(gaps):
            self._gap_steps.append(gaps + self._flushed)
            self._gap_start_s.append(rows[gaps, 0])
        self._ends.extend(end)
        for name, col in self._counts.items():
            col.extend(to_counts(rows[:, STEP_COLUMNS.index(name)], name))
        self._last_end_s = float(end[-1])
        self._flushed = self.count

    def columns(self) -> StepColumns:
        """Every step so far, by column (the arrays are shared, read-only)."""
        self._flush()
        if len(self._gap_steps) > 1:
            self._gap_steps = [np.concatenate(self._gap_steps)]
            self._gap_start_s = [np.concatenate(self._gap_start_s)]
        gaps = self._gap_steps[0] if self._gap_steps else np.empty(0, dtype=np.int64)
        gap_start = self._gap_start_s[0] if self._gap_start_s else np.empty(0)
        return StepColumns(self.mode, self._ends.joined(), gaps, gap_start,
                           {name: col.joined() for name, col in self._counts.items()})
