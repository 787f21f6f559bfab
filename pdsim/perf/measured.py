"""Step times interpolated from measurements (a CSV file) instead of the roofline.

The file (format in docs/step-time.md, example in examples/measured_step_times.csv):

    # comment lines start with '#'
    phase,batch_size,tokens,context_tokens,step_time_s
    decode,16,64,2048,0.0231
    prefill,1,4096,0,0.262

- ``phase``: ``prefill`` or ``decode``; both must be present.
- ``batch_size``: requests in the step (recorded, not interpolated on).
- ``tokens``: query tokens of the step (prefill: the chunk; decode: all verified
  positions, ``batch_size x (1 + num_speculative_tokens)``).
- ``context_tokens``: mean context per request before the step (decode: the KV read per
  request; prefill: tokens already cached before the chunk).
- ``step_time_s``: measured seconds of one engine step, drafter included if it ran.
- an optional ``notes`` column is ignored.

Each phase is a surface over (tokens, context_tokens): piecewise linear in tokens along
each measured context, then linear between the two neighbouring contexts. Below the
smallest measured value on either axis the edge is held; above the largest,
``extrapolation: linear`` continues the last segment and ``clamp`` holds the edge.
Repeated (tokens, context) points are averaged.
"""

from __future__ import annotations

import csv
import io
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

from pdsim.errors import InputFileError
from pdsim.perf.base import StepBatch
from pdsim.perf.config import MeasuredStepTimeConfig

COLUMNS = ("phase", "batch_size", "tokens", "context_tokens", "step_time_s")
_OPTIONAL = ("notes",)
_PHASES = ("prefill", "decode")
_MIN_STEP_S = 1e-6


def _interp(xs: Sequence[float], ys: Sequence[float], x: float, linear: bool) -> float:
    """Piecewise-linear ``ys(x)``; edge held below, last segment (or edge) above."""
    n = len(xs)
    if x <= xs[0] or n == 1:
        return ys[0]
    if x >= xs[-1]:
        if not linear:
            return ys[-1]
        i = n - 1
    else:
        i = bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


class _Surface:
    """Step time over (tokens, context) from measured points of one phase."""

    __slots__ = ("_contexts", "_curves", "_linear")

    def __init__(self, points: dict[tuple[float, float], list[float]], linear: bool) -> None:
        by_ctx: dict[float, dict[float, float]] = {}
        for (tokens, ctx), times in points.items():
            by_ctx.setdefault(ctx, {})[tokens] = sum(times) / len(times)
        self._contexts = sorted(by_ctx)
        self._curves = [
            (sorted(by_ctx[c]), [by_ctx[c][t] for t in sorted(by_ctx[c])])
            for c in self._contexts
        ]
        self._linear = linear

    def at(self, tokens: float, ctx: float) -> float:
        cs, curves, linear = self._contexts, self._curves, self._linear
        n = len(cs)
        if ctx <= cs[0] or n == 1:
            xs, ys = curves[0]
            return _interp(xs, ys, tokens, linear)
        if ctx >= cs[-1]:
            if not linear:
                xs, ys = curves[-1]
                return _interp(xs, ys, tokens, linear)
            i = n - 1
        else:
            i = bisect_right(cs, ctx)
        lo = _interp(*curves[i - 1], tokens, linear)
        hi = _interp(*curves[i], tokens, linear)
        return lo + (hi - lo) * (ctx - cs[i - 1]) / (cs[i] - cs[i - 1])


def read_measurements(path: str | Path) -> dict[str, dict[tuple[float, float], list[float]]]:
    """Parse a measured-step-time CSV into ``{phase: {(tokens, context): [seconds]}}``.

    Raises ``InputFileError`` (file and line) for anything malformed.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(str(p), None, "no such file (step_time.csv_path)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot be read: {exc}") from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines())
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputFileError(str(p), None, "no header and no rows")
    header_line, header_text = lines[0]
    header = [h.strip() for h in next(csv.reader(io.StringIO(header_text)))]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS + _OPTIONAL]
    if missing or unknown:
        what = "; ".join(x for x in (
            f"missing column(s) {', '.join(missing)}" if missing else "",
            f"unknown column(s) {', '.join(unknown)}" if unknown else "") if x)
        raise InputFileError(str(p), header_line,
                             f"{what}; the header must name {', '.join(COLUMNS)}")
    index = {name: header.index(name) for name in COLUMNS}
    out: dict[str, dict[tuple[float, float], list[float]]] = {ph: {} for ph in _PHASES}
    for lineno, line in lines[1:]:
        row = [c.strip() for c in next(csv.reader(io.StringIO(line)))]
        if len(row) != len(header):
            raise InputFileError(str(p), lineno,
                                 f"{len(row)} fields, the header has {len(header)}")
        phase = row[index["phase"]]
        if phase not in _PHASES:
            raise InputFileError(str(p), lineno, f"phase {phase!r}: use prefill or decode")
        try:
            batch = int(row[index["batch_size"]])
            tokens = int(row[index["tokens"]])
            ctx = float(row[index["context_tokens"]])
            step = float(row[index["step_time_s"]])
        except ValueError as exc:
            raise InputFileError(str(p), lineno, f"not a number: {exc}") from None
        if batch < 1 or tokens < 1:
            raise InputFileError(str(p), lineno, "batch_size and tokens must be >= 1")
        if not 0 <= ctx < float("inf"):
            raise InputFileError(str(p), lineno, "context_tokens must be >= 0")
        if not 0 < step < float("inf"):
            raise InputFileError(str(p), lineno, "step_time_s must be > 0")
        out[phase].setdefault((float(tokens), ctx), []).append(step)
    for phase in _PHASES:
        if not out[phase]:
            raise InputFileError(str(p), None, (
                f"no {phase} rows; measure both phases (decode instances also prefill: "
                f"the recomputed backoff tokens)"))
    return out


class MeasuredStepTime:
    """The measured ``StepTimeModel``: interpolates a CSV (see the module docstring).

    A step with prefill and decode work costs ``prefill(tokens, context) +
    decode(tokens, context) - mixed_overlap_s``; drafter repair tokens add
    ``drafter_repair_token_s`` each. Never less than 1 microsecond.
    """

    __slots__ = ("_decode", "_overlap_s", "_prefill", "_repair_s")

    def __init__(self, cfg: MeasuredStepTimeConfig) -> None:
        points = read_measurements(cfg.csv_path)
        linear = cfg.extrapolation == "linear"
        self._prefill = _Surface(points["prefill"], linear)
        self._decode = _Surface(points["decode"], linear)
        self._overlap_s = cfg.mixed_overlap_s
        self._repair_s = cfg.drafter_repair_token_s

    def step_time_s(self, batch: StepBatch) -> float:
        """Interpolated seconds of one engine step computing ``batch``."""
        p = batch.prefill_tokens
        r = batch.decode_requests
        t = 0.0
        if p:
            before = batch.prefill_attention_pairs / p - 0.5 * (p + 1)  # one-chunk inverse
            t += self._prefill.at(p, before if before > 0.0 else 0.0)
        if r:
            t += self._decode.at(batch.decode_tokens, batch.decode_context_tokens / r)
            if p:
                t -= self._overlap_s
        t += batch.drafter_repair_tokens * self._repair_s
        return t if t > _MIN_STEP_S else _MIN_STEP_S
