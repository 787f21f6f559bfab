"""Trace replay: Mooncake JSONL and Azure LLM inference CSV.

Readers check every row and raise ``InputFileError(file, line, message)`` on the first bad
one: a missing column, a value that is not a non-negative integer, a bad timestamp, or a
timestamp earlier than the previous row's (unless the trace config says ``unsorted: sort``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pdsim._model import MAX_TOKENS
from pdsim.errors import InputFileError
from pdsim.workload.base import RequestSpecs, SpecsOrigin
from pdsim.workload.config import AzureTrace, MooncakeTrace, Trace

PKG_PREFIX = "pkg:"


def resolve_trace_path(path: str) -> Path:
    """The file a trace ``path`` names.

    ``pkg:<rel>`` is ``<rel>`` inside pdsim's shipped data (``pdsim/data``); any other
    relative path is relative to the current directory.
    """
    if path.startswith(PKG_PREFIX):
        rel = path[len(PKG_PREFIX):].lstrip("/")
        return Path(str(resources.files("pdsim").joinpath("data", *rel.split("/"))))
    return Path(path)


@dataclass(frozen=True)
class TraceRows:
    """A trace as read, in file order: one entry per request row.

    ``time_s`` is seconds since the first row; ``line`` is each row's line in the file.
    """

    file: str
    time_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    line: np.ndarray  # int64
    hash_ids: tuple[tuple[int, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.time_s)


# --------------------------------------------------------------------------- mooncake

MAX_TIMESTAMP_MS = 1e15
"""The largest Mooncake timestamp read: epoch milliseconds (about 1.8e12 now) fit, and a
float64 still resolves an eighth of a millisecond at it; a longer integer would not even
convert to a float."""


def read_mooncake(path: str | Path, hash_block_tokens: int = 512) -> TraceRows:
    """Read a Mooncake JSONL trace; ``hash_ids`` may be absent (then no block hashes).

    Each non-blank line is an object with ``timestamp`` (ms, >= 0), ``input_length`` and
    ``output_length`` (integers >= 0) and optionally ``hash_ids`` (a list of integers, at
    most ``ceil(input_length / hash_block_tokens)`` of them); other keys are ignored.
    """
    file = str(path)
    times_ms: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    lines: list[int] = []
    hashes: list[tuple[int, ...]] = []
    any_hashes = False
    for lineno, text in _lines(file):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputFileError(file, lineno, f"invalid JSON: {exc.msg}",
                                 column=exc.colno) from None
        except ValueError:  # an integer beyond Python's 4,300-digit conversion limit
            raise InputFileError(file, lineno, "a number too long to read") from None
        if not isinstance(row, dict):
            raise InputFileError(file, lineno, "each line must be a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in row:
                raise InputFileError(file, lineno, f"missing field {key!r}")
        ts = row["timestamp"]
        if isinstance(ts, int | float) and not isinstance(ts, bool) and (
                abs(ts) > MAX_TIMESTAMP_MS and (isinstance(ts, int) or math.isfinite(ts))):
            got = f"a {len(str(abs(ts)))}-digit number" if isinstance(ts, int) else f"{ts:g}"
            raise InputFileError(file, lineno, f"timestamp must be at most "
                                 f"{MAX_TIMESTAMP_MS:g} ms (got {got})")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise InputFileError(file, lineno,
                                 f"timestamp must be a finite number of ms (got {ts!r})")
        if ts < 0:
            raise InputFileError(file, lineno, f"timestamp must be >= 0 (got {ts!r})")
        n_in = _json_count(row["input_length"], "input_length", file, lineno)
        n_out = _json_count(row["output_length"], "output_length", file, lineno)
        ids: tuple[int, ...] = ()
        if "hash_ids" in row:
            any_hashes = True
            ids = _hash_ids(row["hash_ids"], n_in, hash_block_tokens, file, lineno)
        times_ms.append(float(ts))
        prompts.append(n_in)
        outputs.append(n_out)
        lines.append(lineno)
        hashes.append(ids)
    t = np.asarray(times_ms, dtype=np.float64)
    if len(t):
        t = (t - t[0]) / 1000.0
    return TraceRows(file, t, np.asarray(prompts, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64), np.asarray(lines, dtype=np.int64),
                     tuple(hashes) if any_hashes else None)


def _json_count(value: Any, key: str, file: str, line: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputFileError(file, line, f"{key} must be an integer (got {value!r})")
    if value < 0:
        raise InputFileError(file, line, f"{key} must be >= 0 (got {value})")
    return _bounded_count(value, key, file, line)


def _bounded_count(value: int, key: str, file: str, line: int) -> int:
    if value > MAX_TOKENS:
        got = str(value) if value < 10**30 else f"a {len(str(value))}-digit number"
        raise InputFileError(file, line, f"{key} must be at most {MAX_TOKENS:,} tokens "
                             f"(got {got})")
    return value


def _hash_ids(value: Any, n_in: int, block_tokens: int, file: str,
              line: int) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(h, bool) or not isinstance(h, int)
                                          for h in value):
        raise InputFileError(file, line, "hash_ids must be a list of integers")
    max_blocks = -(-n_in // block_tokens)
    if len(value) > max_blocks:
        raise InputFileError(file, line,
                             f"hash_ids has {len(value)} blocks but input_length {n_in} fills "
                             f"at most {max_blocks} blocks of {block_tokens} tokens "
                             f"(is hash_block_tokens right?)")
    return tuple(value)


# ------------------------------------------------------------------------------ azure

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?")


def read_azure(path: str | Path) -> TraceRows:
    """Read an Azure LLM inference trace CSV (2023 and 2024 releases).

    The header names the columns ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``; up to 9
    fractional digits, an optional UTC offset), ``ContextTokens`` and ``GeneratedTokens``
    (integers >= 0), in any order; other columns are ignored.
    """
    file = str(path)
    times_ns: list[int] = []
    prompts: list[int] = []
    outputs: list[int] = []
    lines: list[int] = []
    day_cache: dict[str, int] = {}
    try:
        with open(file, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            header: list[str] | None = None
            cols = (0, 0, 0)
            try:
                for row in reader:
                    lineno = reader.line_num
                    if not row or all(not c.strip() for c in row):
                        continue
                    if header is None:
                        header = [c.strip() for c in row]
                        cols = _azure_columns(header, file, lineno)
                        continue
                    if len(row) != len(header):
                        raise InputFileError(file, lineno,
                                             f"expected {len(header)} fields as in the "
                                             f"header, got {len(row)}")
                    ts, n_in, n_out = (row[i].strip() for i in cols)
                    times_ns.append(_azure_time_ns(ts, day_cache, file, lineno))
                    prompts.append(_csv_count(n_in, "ContextTokens", file, lineno))
                    outputs.append(_csv_count(n_out, "GeneratedTokens", file, lineno))
                    lines.append(lineno)
            except csv.Error as exc:
                raise InputFileError(file, reader.line_num, f"CSV error: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _open_error(file, exc) from None
    if header is None:
        raise InputFileError(file, None, "empty file: expected a header line "
                             + ",".join(AZURE_COLUMNS))
    t = np.asarray([x - times_ns[0] for x in times_ns], dtype=np.float64) / 1e9 \
        if times_ns else np.zeros(0)
    return TraceRows(file, t, np.asarray(prompts, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64), np.asarray(lines, dtype=np.int64))


def _azure_columns(header: list[str], file: str, line: int) -> tuple[int, int, int]:
    missing = [c for c in AZURE_COLUMNS if c not in header]
    if missing:
        raise InputFileError(file, line, f"missing column {', '.join(missing)}; the header "
                             f"has {', '.join(header)}")
    i, j, k = (header.index(c) for c in AZURE_COLUMNS)
    return i, j, k


def _azure_time_ns(text: str, day_cache: dict[str, int], file: str, line: int) -> int:
    """Nanoseconds since the epoch (UTC; a timestamp without offset is taken as UTC)."""
    m = _DATETIME.fullmatch(text)
    if m is None:
        raise InputFileError(file, line, f"TIMESTAMP must look like 2023-11-16 "
                             f"18:15:46.6805900 (got {text!r})")
    date_key = text[:10]
    day = day_cache.get(date_key)
    if day is None:
        try:
            day = dt.date(int(m[1]), int(m[2]), int(m[3])).toordinal()
        except ValueError as exc:
            raise InputFileError(file, line, f"TIMESTAMP has an invalid date: {exc}") \
                from None
        day_cache[date_key] = day
    hour, minute, second = int(m[4]), int(m[5]), int(m[6])
    if hour > 23 or minute > 59 or second > 59:
        raise InputFileError(file, line, f"TIMESTAMP has an invalid time of day ({text!r})")
    frac_ns = int(m[7].ljust(9, "0")) if m[7] else 0
    offset_s = 0
    if m[8] and m[8] != "Z":
        sign = -1 if m[8][0] == "-" else 1
        digits = m[8][1:].replace(":", "")
        offset_s = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    secs = day * 86400 + hour * 3600 + minute * 60 + second - offset_s
    return secs * 1_000_000_000 + frac_ns


def _csv_count(text: str, column: str, file: str, line: int) -> int:
    if text.isascii() and text.isdigit():
        if len(text) > 30:
            raise InputFileError(file, line, f"{column} must be at most {MAX_TOKENS:,} "
                                 f"tokens (got a {len(text)}-digit number)")
        return _bounded_count(int(text), column, file, line)
    if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
        raise InputFileError(file, line, f"{column} must be >= 0 (got {text})")
    raise InputFileError(file, line, f"{column} must be a non-negative integer (got {text!r})")


# ----------------------------------------------------------------------------- shared


def _lines(file: str) -> list[tuple[int, str]]:
    try:
        with open(file, encoding="utf-8") as fh:
            return list(enumerate(fh, start=1))
    except (OSError, UnicodeDecodeError) as exc:
        raise _open_error(file, exc) from None


def _open_error(file: str, exc: Exception) -> InputFileError:
    if isinstance(exc, FileNotFoundError):
        return InputFileError(file, None, "no such file")
    if isinstance(exc, IsADirectoryError):
        return InputFileError(file, None, "is a directory, not a trace file")
    return InputFileError(file, None, f"cannot be read: {exc}")


def read_trace(cfg: Trace) -> TraceRows:
    """Read the file ``cfg.path`` names, in the format ``cfg.kind`` says."""
    path = resolve_trace_path(cfg.path)
    if isinstance(cfg, MooncakeTrace):
        return read_mooncake(path, cfg.hash_block_tokens)
    if isinstance(cfg, AzureTrace):
        return read_azure(path)
    raise TypeError(f"unknown trace kind {type(cfg).__name__}")


def replay_trace(cfg: Trace, duration_s: float | None = None,
                 closed_loop_concurrency: int | None = None) -> RequestSpecs:
    """The requests of a trace, selected and time-scaled as ``cfg`` says.

    Order of operations: check order (or sort), drop zero-length rows if asked, skip rows
    before ``start_offset_s``, keep the first ``max_requests``, rebase so the first kept
    row arrives at 0, scale the gaps (``time_scale``, or so that the mean gap is
    ``1 / target_rate_per_s``), and finally drop arrivals after ``duration_s``. Under a
    closed loop (``closed_loop_concurrency`` set) arrival times are NaN.
    """
    rows = read_trace(cfg)
    file = rows.file
    if len(rows) == 0:
        raise InputFileError(file, None, "the trace has no requests")
    order = np.arange(len(rows))
    back = np.flatnonzero(np.diff(rows.time_s) < 0)
    if len(back):
        if cfg.unsorted == "error":
            i = int(back[0]) + 1
            raise InputFileError(file, int(rows.line[i]),
                                 f"timestamp goes back {rows.time_s[i - 1] - rows.time_s[i]:.6g}"
                                 f" s from line {int(rows.line[i - 1])}; sort the trace or "
                                 f"set unsorted: sort")
        order = np.argsort(rows.time_s, kind="stable")
    zero = (rows.prompt_tokens[order] == 0) | (rows.output_tokens[order] == 0)
    num_zero = int(zero.sum())
    if num_zero:
        if not cfg.skip_zero_length:
            i = int(order[np.flatnonzero(zero)[0]])
            raise InputFileError(file, int(rows.line[i]),
                                 "a request needs at least 1 input and 1 output token; set "
                                 "skip_zero_length: true to drop such rows")
        order = order[~zero]
    t = rows.time_s[order]
    if len(t):
        t = t - t[0]
    keep = t >= cfg.start_offset_s
    order, t = order[keep], t[keep]
    if cfg.max_requests is not None:
        order, t = order[: cfg.max_requests], t[: cfg.max_requests]
    if len(order) == 0:
        raise InputFileError(file, None, f"no requests left after start_offset_s="
                             f"{cfg.start_offset_s} and dropping zero-length rows")
    t = t - t[0]
    scale = _time_scale(cfg, t, file)
    arrival_s = t * scale if scale != 1.0 else t
    if duration_s is not None and closed_loop_concurrency is None:
        n = int(np.searchsorted(arrival_s, duration_s, side="right"))
        order, arrival_s = order[:n], arrival_s[:n]
    if closed_loop_concurrency is not None:
        arrival_s = np.full(len(order), np.nan, dtype=np.float64)
    hash_ids = None
    origin = SpecsOrigin(arrivals="recorded" if closed_loop_concurrency is None
                         else "closed loop", trace_file=str(file), time_scale=scale,
                         skipped_zero_length_rows=num_zero)
    if rows.hash_ids is not None:
        hash_ids = tuple(rows.hash_ids[int(i)] for i in order)
    hash_block_tokens = cfg.hash_block_tokens if isinstance(cfg, MooncakeTrace) else None
    return RequestSpecs(arrival_s=np.ascontiguousarray(arrival_s, dtype=np.float64),
                        prompt_tokens=rows.prompt_tokens[order].copy(),
                        output_tokens=rows.output_tokens[order].copy(),
                        closed_loop_concurrency=closed_loop_concurrency,
                        hash_ids=hash_ids, hash_block_tokens=hash_block_tokens,
                        source=cfg.kind, origin=origin)


def _time_scale(cfg: Trace, t: np.ndarray, file: str) -> float:
    if cfg.time_scale is not None:
        return cfg.time_scale
    if cfg.target_rate_per_s is None:
        return 1.0
    span_s = float(t[-1]) if len(t) else 0.0
    if len(t) < 2 or span_s <= 0:
        raise InputFileError(file, None, "target_rate_per_s needs at least two requests "
                             "at different times")
    return (len(t) - 1) / (span_s * cfg.target_rate_per_s)
