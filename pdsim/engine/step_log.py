"""An instance's step log as the run writes it: rows in, columns grown in chunks.

A step (or a decode run's block of steps) is written as rows of the eight doubles of
``pdsim.facts.STEP_COLUMNS`` into a small buffer; every ``FLUSH_ROWS`` rows the buffer
goes into the columns the run keeps (``record_steps``), each a list of numpy chunks that
double in size up to ``MAX_CHUNK_ROWS``. ``columns()`` joins each column's chunks into
one array (the facts the results read, without a further copy).
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


class ChunkedColumn:
    """A growing 1-d array kept as chunks (no copy of what is written as it grows)."""

    __slots__ = ("_chunks", "_dtype", "_free", "_used")

    def __init__(self, dtype: type[np.generic]) -> None:
        self._dtype = dtype
        self._chunks: list[np.ndarray] = []
        self._used = 0  # filled part of the last chunk
        self._free = 0  # room left in the last chunk

    def extend(self, values: np.ndarray) -> None:
        pos, n = 0, len(values)
        while pos < n:
            if not self._free:
                size = min(MAX_CHUNK_ROWS, 2 * len(self._chunks[-1])) if self._chunks \
                    else FIRST_CHUNK_ROWS
                self._chunks.append(np.empty(max(size, min(n - pos, MAX_CHUNK_ROWS)),
                                             dtype=self._dtype))
                self._used, self._free = 0, len(self._chunks[-1])
            k = min(self._free, n - pos)
            self._chunks[-1][self._used:self._used + k] = values[pos:pos + k]
            self._used += k
            self._free -= k
            pos += k

    def joined(self) -> np.ndarray:
        """Everything written, as one read-only array; later writes go to new chunks."""
        parts = [*self._chunks[:-1], self._chunks[-1][:self._used]] if self._chunks else []
        # one full chunk is kept as it is; anything else is joined (a partly filled chunk
        # would hold on to its unused room)
        whole = len(parts) == 1 and self._free == 0
        out = (parts[0] if whole else
               np.concatenate(parts) if parts else np.empty(0, dtype=self._dtype))
        out.flags.writeable = False
        self._chunks = [out] if len(out) else []
        self._used, self._free = len(out), 0
        return out


class StepLog:
    """One instance's per-step facts, written step by step or a block at a time."""

    __slots__ = ("_buf", "_counts", "_ends", "_flushed", "_gap_start_s", "_gap_steps",
                 "_last_end_s", "count", "mode")

    def __init__(self, mode: StepMode) -> None:
        self.mode = mode
        self.count = 0  # steps written
        self._buf = array("d")  # rows not yet in the columns
        self._flushed = 0
        self._ends = ChunkedColumn(np.float64)
        self._counts = {name: ChunkedColumn(np.int32) for name in COUNT_COLUMNS[mode]}
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
        """Consecutive steps' rows, a ``(steps, 8)`` array of doubles."""
        self._buf.frombytes(np.ascontiguousarray(rows, dtype=np.float64).tobytes())
        self.count += len(rows)
        if self.count - self._flushed >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.count == self._flushed:
            return
        rows = np.array(self._buf, dtype=np.float64).reshape(-1, WIDTH)
        del self._buf[:]
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
