"""Speculative-decoding acceptance from vLLM's Prometheus ``/metrics`` text.

vLLM (v1) exposes four counters per engine, labelled ``model_name`` and ``engine``:

- ``vllm:spec_decode_num_drafts``: decode steps that carried drafts;
- ``vllm:spec_decode_num_draft_tokens``: draft tokens proposed;
- ``vllm:spec_decode_num_accepted_tokens``: draft tokens accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos`` (extra label ``position`` = "0".."N-1"):
  steps whose first ``position + 1`` drafts were all accepted.

In the text exposition a counter's samples carry a ``_total`` suffix (and, unless disabled,
a ``_created`` timestamp sample, which is ignored). One scrape gives the counts since each
engine started; two scrapes of the same servers give the counts over the interval between
them. Parsing is done by ``prometheus_client``'s parser; this module only selects, checks
and sums.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pdsim.errors import InputFileError, PdsimError, read_text_file

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
SPEC_DECODE_COUNTERS: tuple[str, ...] = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, ACCEPTED_PER_POS)
POSITION_LABEL = "position"

# A label set without ``position``, as sorted (name, value) pairs: hashable and ordered.
LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SeriesCounts:
    """The four spec-decode counters of one label set (one engine of one model)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]


@dataclass(frozen=True)
class Scrape:
    """The spec-decode counters of one ``/metrics`` scrape, per label set."""

    file: str
    series: Mapping[LabelSet, SeriesCounts]

    def select(self, selector: Mapping[str, str] | None) -> dict[LabelSet, SeriesCounts]:
        """The series whose labels include every ``name: value`` of ``selector``.

        ``None`` or ``{}`` selects all. Raises ``InputFileError`` when nothing matches,
        listing the label sets present.
        """
        chosen = _matching(self.series, selector)
        if not chosen:
            want = {str(k): str(v) for k, v in (selector or {}).items()}
            present = "; ".join(format_labels(ls) for ls in sorted(self.series)) or "none"
            raise InputFileError(self.file, None,
                                 f"no spec-decode series matches the selector "
                                 f"{format_labels(tuple(sorted(want.items())))}; "
                                 f"label sets present: {present}")
        return chosen


def _matching(series: Mapping[LabelSet, SeriesCounts], selector: Mapping[str, str] | None
              ) -> dict[LabelSet, SeriesCounts]:
    if not selector:
        return dict(series)
    want = {str(k): str(v) for k, v in selector.items()}
    return {ls: c for ls, c in series.items()
            if all(dict(ls).get(k) == v for k, v in want.items())}


@dataclass(frozen=True)
class AcceptanceStats:
    """Draft acceptance counts summed over the selected series (vLLM's definitions).

    ``accepted_per_pos[i]`` counts steps whose first i+1 drafts were accepted, so the
    per-position rates are P(first i+1 drafts accepted) and sum to acceptance length - 1.
    Derived values are NaN when ``num_drafts`` is 0.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    label_sets: tuple[str, ...] = ()
    source: str = ""

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / draft tokens, in [0, 1]."""
        if self.num_draft_tokens == 0:
            return math.nan
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per drafted step: 1 + accepted / drafts (includes the bonus)."""
        if self.num_drafts == 0:
            return math.nan
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def per_position_rates(self) -> tuple[float, ...]:
        """``accepted_per_pos[i] / num_drafts``: P(the first i+1 drafts are accepted)."""
        if self.num_drafts == 0:
            return tuple(math.nan for _ in self.accepted_per_pos)
        return tuple(c / self.num_drafts for c in self.accepted_per_pos)

    @property
    def num_speculative_tokens(self) -> int | None:
        """Drafts per step, ``num_draft_tokens / num_drafts`` when that is a whole number.

        ``None`` when steps drafted different numbers of tokens (or there were no drafts).
        """
        if self.num_drafts == 0 or self.num_draft_tokens % self.num_drafts:
            return None
        return self.num_draft_tokens // self.num_drafts

    def inconsistencies(self) -> list[str]:
        """What no serving run can produce: more accepted than drafted tokens, a position
        counted more often than steps drafted or more often than the position before it,
        per-position counts that do not add up to the accepted total, positions that do not
        match the drafts per step."""
        out: list[str] = []
        if self.num_accepted_tokens > self.num_draft_tokens:
            out.append(f"{ACCEPTED_TOKENS} ({self.num_accepted_tokens}) exceeds "
                       f"{DRAFT_TOKENS} ({self.num_draft_tokens})")
        if self.num_draft_tokens < self.num_drafts:
            out.append(f"{DRAFT_TOKENS} ({self.num_draft_tokens}) is below {DRAFTS} "
                       f"({self.num_drafts}): a drafted step drafts at least one token")
        for i, c in enumerate(self.accepted_per_pos):
            if c > self.num_drafts:
                out.append(f"{ACCEPTED_PER_POS} position {i} ({c}) exceeds {DRAFTS} "
                           f"({self.num_drafts})")
            if i and c > self.accepted_per_pos[i - 1]:
                out.append(f"{ACCEPTED_PER_POS} position {i} ({c}) exceeds position {i - 1} "
                           f"({self.accepted_per_pos[i - 1]}): a step accepts draft i only "
                           f"after draft i-1")
        if self.accepted_per_pos and sum(self.accepted_per_pos) != self.num_accepted_tokens:
            # vLLM adds each step's accepted count to both: a step accepting k drafts adds k
            # to the total and 1 to each of positions 0..k-1
            out.append(f"{ACCEPTED_TOKENS} ({self.num_accepted_tokens}) is not the sum of "
                       f"{ACCEPTED_PER_POS} ({sum(self.accepted_per_pos)}): vLLM counts each "
                       "accepted draft in both")
        n = self.num_speculative_tokens
        if n is not None and self.accepted_per_pos and len(self.accepted_per_pos) != n:
            out.append(f"{len(self.accepted_per_pos)} positions in {ACCEPTED_PER_POS} but "
                       f"{n} drafts per step ({DRAFT_TOKENS} / {DRAFTS})")
        return out

    def to_config_yaml(self, *, method: str | None = None, digits: int = 4) -> str:
        """A pdsim config snippet (YAML text) reproducing these acceptance rates.

        ``method`` is the drafter (``speculative.method``). vLLM's spec-decode metrics do
        not say which drafter produced them, so without one the snippet says ``mtp`` and
        marks it as assumed.
        ``num_speculative_tokens`` is the measured drafts per step, or the number of
        positions when the step sizes varied. Rates are rounded to ``digits`` decimals
        (rounding keeps them non-increasing, as pdsim's ``per_position`` kind requires).
        """
        if self.num_drafts == 0:
            raise ValueError("no drafts counted: the acceptance rates are undefined")
        n = self.num_speculative_tokens or len(self.accepted_per_pos)
        rates = ", ".join(f"{round(r, digits):.{digits}f}" for r in self.per_position_rates)
        where = f" from {self.source}" if self.source else ""
        method_line = (f"  method: {method}\n" if method is not None else
                       "  method: mtp  # assumed: the metrics do not name the drafter\n")
        return (
            f"# measured{where}: {self.num_drafts} drafted steps, acceptance rate "
            f"{self.acceptance_rate:.4f}, acceptance length {self.acceptance_length:.4f}\n"
            "speculative:\n"
            f"{method_line}"
            f"  num_speculative_tokens: {n}\n"
            "  acceptance:\n"
            "    kind: per_position\n"
            f"    rates: [{rates}]\n"
        )

    def summary_lines(self) -> list[str]:
        """Human-readable lines: counts, rates and which series were summed."""
        per_pos = ", ".join(f"{r:.4f}" for r in self.per_position_rates)
        lines = [
            f"source:                {self.source}",
            f"series summed:         {len(self.label_sets)}",
            *(f"  {ls}" for ls in self.label_sets),
            f"drafted steps:         {self.num_drafts}",
            f"draft tokens:          {self.num_draft_tokens}",
            f"accepted tokens:       {self.num_accepted_tokens}",
            f"acceptance rate:       {self.acceptance_rate:.4f}",
            f"acceptance length:     {self.acceptance_length:.4f}",
            f"per-position rates:    [{per_pos}]",
        ]
        return lines


def format_labels(labels: LabelSet) -> str:
    """``{a="x",b="y"}``, the exposition's own spelling of a label set."""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


# --------------------------------------------------------------------------- parsing


def _base_name(sample_name: str) -> str | None:
    """The counter a sample belongs to, or None for ``_created`` and other samples."""
    if sample_name.endswith("_created"):
        return None
    base = sample_name.removesuffix("_total")
    return base if base in SPEC_DECODE_COUNTERS else None


def _locate_parse_error(text: str) -> tuple[int | None, str]:
    """Line number and message of the first line the parser rejects on its own."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            for _ in text_string_to_metric_families(line + "\n"):
                pass
        except ValueError as exc:
            return lineno, str(exc)
    return None, ""


def _whole(value: float, file: str, what: str) -> int:
    if not math.isfinite(value) or value < 0 or abs(value - round(value)) > 1e-6:
        raise InputFileError(file, None, f"{what} is {value!r}; a counter of tokens or steps "
                                         "must be a non-negative whole number")
    return round(value)


def parse_scrape(text: str, file: str = "<metrics>") -> Scrape:
    """Read the spec-decode counters from one Prometheus text exposition.

    Counters may be spelled with or without the ``_total`` suffix; every label set (every
    engine / model) becomes one series. Errors (not exposition text, non-numeric values,
    no spec-decode counters, a label set missing a counter, gaps in ``position``) are
    ``InputFileError`` naming ``file`` (and the line when the parser rejects one).
    """
    raw: dict[str, dict[LabelSet, float]] = {name: {} for name in SPEC_DECODE_COUNTERS}
    per_pos: dict[LabelSet, dict[int, float]] = {}
    try:
        samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    except (ValueError, IndexError, KeyError) as exc:
        line, msg = _locate_parse_error(text)
        raise InputFileError(file, line, "not Prometheus text exposition format: "
                                         f"{msg or exc}") from None
    for s in samples:
        name = _base_name(s.name)
        if name is None:
            continue
        labels = {str(k): str(v) for k, v in s.labels.items()}
        try:
            value = float(s.value)
        except OverflowError:  # an integer of hundreds of digits: beyond any counter
            raise InputFileError(file, None, f"{s.name}"
                                 f"{format_labels(tuple(sorted(s.labels.items())))} is "
                                 f"{len(str(s.value))} digits long; a counter is a number "
                                 "below 1e308") from None
        if name == ACCEPTED_PER_POS:
            pos_text = labels.pop(POSITION_LABEL, None)
            if pos_text is None or not pos_text.isdigit():
                raise InputFileError(file, None, f"{ACCEPTED_PER_POS} sample "
                                                 f"{format_labels(tuple(sorted(s.labels.items())))}"
                                                 " needs a numeric position label")
            key = tuple(sorted(labels.items()))
            slot = per_pos.setdefault(key, {})
            slot[int(pos_text)] = slot.get(int(pos_text), 0.0) + value
        else:
            key = tuple(sorted(labels.items()))
            raw[name][key] = raw[name].get(key, 0.0) + value
    keys = set(raw[DRAFTS]) | set(raw[DRAFT_TOKENS]) | set(raw[ACCEPTED_TOKENS]) | set(per_pos)
    if not keys:
        raise InputFileError(file, None, "no vLLM spec-decode counters found (expected "
                                         f"{', '.join(n + '_total' for n in SPEC_DECODE_COUNTERS)}"
                                         "); was the server started with speculative decoding?")
    series: dict[LabelSet, SeriesCounts] = {}
    for key in sorted(keys):
        where = format_labels(key)
        missing = [n for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS) if key not in raw[n]]
        if key not in per_pos:
            missing.append(ACCEPTED_PER_POS)
        if missing:
            raise InputFileError(file, None, f"label set {where} lacks {', '.join(missing)}")
        positions = per_pos[key]
        if sorted(positions) != list(range(len(positions))):
            raise InputFileError(file, None, f"{ACCEPTED_PER_POS}{where} has positions "
                                             f"{sorted(positions)}; expected 0..N-1 without gaps")
        series[key] = SeriesCounts(
            num_drafts=_whole(raw[DRAFTS][key], file, f"{DRAFTS}{where}"),
            num_draft_tokens=_whole(raw[DRAFT_TOKENS][key], file, f"{DRAFT_TOKENS}{where}"),
            num_accepted_tokens=_whole(raw[ACCEPTED_TOKENS][key], file,
                                       f"{ACCEPTED_TOKENS}{where}"),
            accepted_per_pos=tuple(_whole(positions[i], file, f"{ACCEPTED_PER_POS}{where}")
                                   for i in range(len(positions))),
        )
    return Scrape(file=file, series=series)


def read_scrape(path: str | Path) -> Scrape:
    """``parse_scrape`` of the file at ``path``; unreadable files are ``InputFileError``."""
    p = Path(path)
    return parse_scrape(read_text_file(p, "a metrics file"), str(p))


# --------------------------------------------------------------------------- aggregation


def _sum(series: Iterable[tuple[LabelSet, SeriesCounts]], file: str, source: str
         ) -> AcceptanceStats:
    items = list(series)
    models = sorted({dict(ls).get("model_name", "") for ls, _ in items})
    if len(models) > 1:
        # engines of one model add up; two models' counters would make a rate of neither
        names = ", ".join(repr(m) for m in models)
        raise InputFileError(file, None,
                             f"the selected spec-decode series belong to {len(models)} "
                             f"models (model_name {names}); summing them would mix their "
                             f"acceptance, so pick one with --label model_name=NAME")
    npos = max(len(c.accepted_per_pos) for _, c in items)
    per_pos = [0] * npos
    for _, c in items:
        for i, v in enumerate(c.accepted_per_pos):
            per_pos[i] += v
    stats = AcceptanceStats(
        num_drafts=sum(c.num_drafts for _, c in items),
        num_draft_tokens=sum(c.num_draft_tokens for _, c in items),
        num_accepted_tokens=sum(c.num_accepted_tokens for _, c in items),
        accepted_per_pos=tuple(per_pos),
        label_sets=tuple(format_labels(ls) for ls, _ in items),
        source=source,
    )
    if stats.num_drafts == 0:
        raise InputFileError(file, None, "zero drafted steps in the selected series "
                                         "(no decode traffic?): acceptance is undefined")
    return stats


def acceptance_from_scrape(scrape: Scrape, selector: Mapping[str, str] | None = None
                           ) -> AcceptanceStats:
    """Acceptance since the engines started: one scrape's counters, summed over the series
    ``selector`` picks (all by default)."""
    chosen = scrape.select(selector)
    return _sum(sorted(chosen.items()), scrape.file, scrape.file)


def acceptance_between(before: Scrape, after: Scrape,
                       selector: Mapping[str, str] | None = None) -> AcceptanceStats:
    """Acceptance over the interval between two scrapes (``after - before`` per series).

    A series new in ``after`` counts from zero. A counter that went down, or a series
    that disappeared, means an engine restarted in between: ``InputFileError``, since the
    difference would be meaningless.
    """
    chosen = after.select(selector)
    old = _matching(before.series, selector)
    gone = [ls for ls in old if ls not in chosen]
    if gone:
        raise InputFileError(after.file, None,
                             f"series {', '.join(format_labels(g) for g in gone)} present in "
                             f"{before.file} is missing here (engine restarted or removed?)")
    deltas: list[tuple[LabelSet, SeriesCounts]] = []
    for ls in sorted(chosen):
        a = chosen[ls]
        b = old.get(ls, SeriesCounts(0, 0, 0, ()))
        npos = max(len(a.accepted_per_pos), len(b.accepted_per_pos))
        a_pos = a.accepted_per_pos + (0,) * (npos - len(a.accepted_per_pos))
        b_pos = b.accepted_per_pos + (0,) * (npos - len(b.accepted_per_pos))
        d = SeriesCounts(
            num_drafts=a.num_drafts - b.num_drafts,
            num_draft_tokens=a.num_draft_tokens - b.num_draft_tokens,
            num_accepted_tokens=a.num_accepted_tokens - b.num_accepted_tokens,
            accepted_per_pos=tuple(x - y for x, y in zip(a_pos, b_pos, strict=True)),
        )
        if min(d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens,
               *d.accepted_per_pos) < 0:
            raise InputFileError(after.file, None,
                                 f"counters of {format_labels(ls)} went down since "
                                 f"{before.file}: a counter reset (engine restart) between "
                                 "the scrapes; take both scrapes within one server lifetime")
        deltas.append((ls, d))
    return _sum(deltas, after.file, f"{before.file} -> {after.file}")


def import_metrics_report(paths: list[str], selector: Mapping[str, str] | None = None,
                          method: str | None = None) -> tuple[AcceptanceStats, str]:
    """Acceptance from one scrape (since start) or two (the interval), and its YAML snippet.

    The entry point of ``pdsim import-metrics``: returns the stats and the pdsim
    ``speculative:`` config snippet that reproduces them.
    """
    if len(paths) == 1:
        stats = acceptance_from_scrape(read_scrape(paths[0]), selector)
    elif len(paths) == 2:
        stats = acceptance_between(read_scrape(paths[0]), read_scrape(paths[1]), selector)
    else:
        raise PdsimError(f"give one metrics scrape, or two (before and after); got {len(paths)}")
    problems = stats.inconsistencies()
    if problems:
        raise PdsimError("\n".join(f"{stats.source or 'metrics'}: {p}; not a pdsim config "
                                    f"(counters from different runs or series?)"
                                    for p in problems))
    snippet = stats.to_config_yaml(method=method)
    _check_snippet(snippet, stats.source)
    return stats, snippet


def _check_snippet(snippet: str, source: str) -> None:
    """The snippet must load as pdsim's ``speculative`` section: never print one pdsim
    itself would reject."""
    import json

    import yaml
    from pydantic import ValidationError

    from pdsim.config_sections import SpeculativeConfig

    try:  # as the loader validates: through JSON, strictly
        SpeculativeConfig.model_validate_json(json.dumps(yaml.safe_load(snippet)["speculative"]))
    except ValidationError as exc:
        msg = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        raise PdsimError(f"{source or 'metrics'}: the measured rates do not make a valid "
                         f"pdsim config: {msg}") from None
