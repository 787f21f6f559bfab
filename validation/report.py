"""Render docs/validation.md from row results."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from validation.harness import EXPLAIN_ABOVE_PCT, RowResult, summarize

NOT_USED = Path(__file__).parent / "not_used.yaml"
COMMAND = ".venv/bin/python -m validation --write"
TARGETS_PCT = {"ratio": 15.0, "absolute": 25.0}
_META = re.compile(r"^Generated on (?P<date>\S+) from pdsim commit `(?P<commit>[^`]+)` by "
                   r"`(?P<command>[^`]+)`\.$", re.M)


@dataclass(frozen=True)
class Meta:
    """What the header records: when, from which pdsim, by which command."""

    date: str
    commit: str
    command: str = COMMAND


def parse_meta(text: str) -> Meta | None:
    """The header of a rendered document, or None when it has none."""
    m = _META.search(text)
    return Meta(m["date"], m["commit"], m["command"]) if m else None


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(x: float, signed: bool = True) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:+.1f}%" if signed else f"{x:.1f}%"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _note(r: RowResult) -> str:
    parts = []
    if r.needs_explanation:
        parts.append(r.row.explanation or "**no explanation in the row file**")
    if r.row.known_failure and not r.passed:
        parts.append(f"known failure: {r.row.known_failure}")
    return _cell(" ".join(parts))


def render(results: list[RowResult], meta: Meta) -> str:
    """The whole document; deterministic for given results and meta."""
    out: list[str] = []
    w = out.append
    w("# Validation: pdsim against published measurements\n")
    w(f"Generated on {meta.date} from pdsim commit `{meta.commit}` by `{meta.command}`.\n")
    w("Do not edit by hand: change a row file in `validation/rows/` and rerun the command "
      "(`--role fit` runs only the rows a fit may use; `--check` compares without writing). "
      "`tests/validation/` fails when a row leaves its tolerance or this file is stale.\n")
    w("Each row is a figure read in a public source, a pdsim configuration of that setup "
      "(what the source does not state is listed as an assumption), and a tolerance with its "
      "reason. *Error* is (pdsim - published) / published. *Ratio* rows are speedups and "
      "before/after ratios; *absolute* rows are times, rates and bandwidths. *Fit* rows may "
      "be used to fit pdsim's defaults; *holdout* rows are never used in a fit and were "
      "chosen as such before any fitting. Rows more than "
      f"{EXPLAIN_ABOVE_PCT:.0f}% off say why.\n")
    w("## Summary\n")
    w("| rows | count | within tolerance | median \\|error\\| | worst \\|error\\| | worst row |")
    w("|---|---:|---:|---:|---:|---|")
    summary = summarize(results)
    for g in summary.groups:
        w(f"| {g.label} | {g.count} | {g.passed} | {_pct(g.median_abs_error_pct, False)} | "
          f"{_pct(g.worst_abs_error_pct, False)} | {g.worst_row} |")
    w("")
    by_label = {g.label: g for g in summary.groups}
    for kind, target in TARGETS_PCT.items():
        parts = []
        for role in ("fit", "holdout", "all"):
            g = by_label[f"{role}, {kind}"]
            ok = math.isfinite(g.median_abs_error_pct) and g.median_abs_error_pct <= target
            parts.append(f"{role} {_pct(g.median_abs_error_pct, False)} "
                         f"({'met' if ok else 'not met'})")
        w(f"- Target for {kind} rows (issue 15): median |error| at most {target:.0f}%: "
          + "; ".join(parts) + ".")
    w("")
    w("## Rows\n")
    w("| # | row | kind | role | pdsim | published | unit | error | tolerance | result | "
      "why more than 30% off |")
    w("|---:|---|---|---|---:|---:|---|---:|---:|---|---|")
    for i, r in enumerate(results, 1):
        result = "pass" if r.passed else "**FAIL**"
        w(f"| {i} | `{r.row.id}` | {r.row.kind.value} | {r.row.role.value} | "
          f"{_fmt(r.pdsim_value)} | {_fmt(r.published)} | {r.row.published.unit} | "
          f"{_pct(r.error_pct)} | {r.row.tolerance_pct:.0f}% | {result} | {_note(r)} |")
    w("")
    w("## Sources\n")
    by_source: dict[str, list[RowResult]] = {}
    for r in results:
        by_source.setdefault(r.row.source.key, []).append(r)
    w(f"{len(by_source)} independent sources:\n")
    for rs in by_source.values():
        src = rs[0].row.source
        ids = ", ".join(f"`{r.row.id}`" for r in rs)
        w(f"- **{_cell(src.title)}**, <{src.url}>: {ids}")
    w("")
    w("## Row details\n")
    for i, r in enumerate(results, 1):
        row = r.row
        w(f"### {i}. {_cell(row.title)}\n")
        w(f"`{row.id}` ({row.kind.value}, {row.role.value}, {row.category}); "
          f"file `validation/rows/{row.path}`.\n")
        w(f"- Published: {_fmt(row.published.value)} {row.published.unit}"
          + (f" ({_cell(row.published.derivation)})" if row.published.derivation else ""))
        w(f"- Source: {_cell(row.source.title)}, <{row.source.url}>, "
          f"{_cell(row.source.locator)}: \"{_cell(row.source.quote)}\"")
        w(f"- pdsim: {_fmt(r.pdsim_value)} {row.published.unit} from `{row.measure.metric}` "
          + (f"of run `{row.measure.run}`" if row.measure.run else
             "as the ratio of runs `{}` / `{}`".format(*(row.measure.ratio or ("", ""))))
          + f"; error {_pct(r.error_pct)}.")
        w("- Assumptions:")
        for a in row.assumptions:
            w(f"  - {_cell(a)}")
        w(f"- Tolerance {row.tolerance_pct:.0f}%: {_cell(row.tolerance_reason)}")
        if row.explanation:
            w(f"- Why it can be off: {_cell(row.explanation)}")
        if row.known_failure:
            w(f"- Known failure: {_cell(row.known_failure)}")
        w("")
    w("## Considered and not used\n")
    for item in yaml.safe_load(NOT_USED.read_text(encoding="utf-8")):
        w(f"- **{_cell(item['source'])}**: {_cell(item['reason'])}")
    w("")
    return "\n".join(out)
