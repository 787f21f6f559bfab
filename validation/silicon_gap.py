"""Where pdsim's TTFT falls short of the silicon sample's: an analysis of scored FIT rows.

    python -m validation.silicon --sample 0 --json scores.json   # every expressible row
    python -m validation.silicon_gap scores.json
    python -m validation.silicon_gap --fit-response 400   # each backend's first-response delay

Only fit rows are read (held-out rows are never used to choose anything); rows that preempt
or did not finish are left out. Two questions, from the rows themselves:

1. Is the gap an overhead or queueing? At the lowest concurrencies (C <= 8) queueing and
   waves are smallest: the gap measured - pdsim there, by partition, model and ISL, says
   whether a per-request cost is missing and whether it grows with the prompt.
2. Does measured TTFT grow with concurrency as pdsim's does? Within a fixed deployment
   (every column but the concurrency equal, same benchmark dump), the exponent b of
   TTFT ~ C^b, measured and pdsim's: waves (every round a burst of C prompts) give b near
   1 at high C, a constant overhead b near 0.
3. Does the gap grow with the request's lifetime? Per benchmark protocol, backend and
   concurrency, the least-squares line gap = a + s x (OSL x measured TPOT / C): a slope s
   near 1 with a high R^2 is what a server holding one of the C requests back for a whole
   request lifetime in every round would show (each round's mean TTFT grows by one
   lifetime over C); s near 0 says the lifetime plays no part.

``--fit-response N`` scores the fit rows of the suite's stratified sample of N rows with no
first-response delay and fits, per backend and per backend and model profile, the request's
engine steps after its first token at which the client's first response arrives
(``router.response_rule``; pdsim.config_sections.RESPONSE_RULES and RESPONSE_RULE_PROFILES
hold the fitted values), then scores both groupings by cross-validation on the fit rows
(folds by deployment), the test that chose the per-model table.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from validation.silicon import CSV_PATH, MODEL_PROFILES, SiliconRow, load_sample, row_protocol

LOW_CONCURRENCY = 8
"""Rows at or below this concurrency count as 'low' (queueing and waves smallest)."""

MIN_GROUP_POINTS = 3
"""Concurrencies a fixed deployment needs for its TTFT ~ C^b exponent."""

GROUP_COLUMNS = ("backend", "backend_version", "model_path", "system", "mode", "isl", "osl",
                 "gemm_quant_mode", "moe_quant_mode", "tp_size", "attention_dp_size",
                 "moe_ep_size", "prefill_num_workers", "prefill_tp_size",
                 "decode_num_workers", "decode_tp_size", "decode_attention_dp_size")


def fit_scores(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fit rows that finished without preemptions."""
    return [s for s in scores if s["split"] == "fit" and not s["error"]
            and s["preemptions"] == 0]


def low_concurrency_gaps(scores: list[dict[str, Any]]) -> list[tuple[str, str, int, int,
                                                                      float, float, float]]:
    """(partition, model, ISL, rows, median gap ms, median measured ms, median pdsim ms)
    over rows at C <= LOW_CONCURRENCY."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for s in scores:
        if s["concurrency"] <= LOW_CONCURRENCY:
            groups[(s["partition"], s["model"].split("/")[-1], s["isl"])].append(s)
    out = []
    for (part, model, isl), rows in sorted(groups.items()):
        meas = np.array([r["measured_ttft_ms"] for r in rows])
        sim = np.array([r["pdsim_ttft_ms"] for r in rows])
        out.append((part, model, isl, len(rows), float(np.median(meas - sim)),
                    float(np.median(meas)), float(np.median(sim))))
    return out


def concurrency_exponents(scores: list[dict[str, Any]], fields: dict[str, dict[str, str]]
                          ) -> list[tuple[str, int, float, float, float]]:
    """(backend mode, deployments, median measured exponent, median pdsim exponent, median
    measured/pdsim at the deployment's lowest C) over fixed deployments with at least
    MIN_GROUP_POINTS concurrencies."""
    groups: dict[tuple[str, ...], dict[int, dict[str, Any]]] = collections.defaultdict(dict)
    for s in scores:
        f = fields[s["row_id"]]
        key = (*(f[c] for c in GROUP_COLUMNS), f["silicon_data_source"].split(";")[0])
        groups[key][s["concurrency"]] = s
    per: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for key, by_c in groups.items():
        if len(by_c) < MIN_GROUP_POINTS:
            continue
        cs = np.array(sorted(by_c), dtype=float)
        meas = np.array([by_c[int(c)]["measured_ttft_ms"] for c in cs])
        sim = np.array([by_c[int(c)]["pdsim_ttft_ms"] for c in cs])
        b_meas = float(np.polyfit(np.log(cs), np.log(meas), 1)[0])
        b_sim = float(np.polyfit(np.log(cs), np.log(sim), 1)[0])
        per[f"{key[0]} {key[4]}"].append((b_meas, b_sim, float(meas[0] / sim[0])))
    out = []
    for name, vals in sorted(per.items()):
        arr = np.array(vals)
        out.append((name, len(vals), float(np.median(arr[:, 0])), float(np.median(arr[:, 1])),
                    float(np.median(arr[:, 2]))))
    return out


LIFETIME_MIN_ROWS = 5
"""Fit rows a (protocol, backend, concurrency) group needs for its lifetime line."""


def lifetime_slopes(scores: list[dict[str, Any]], fields: dict[str, dict[str, str]]
                    ) -> list[tuple[str, int, int, float, float, float]]:
    """(protocol backend mode, C, rows, intercept ms, slope, R^2) of the least-squares line
    of the TTFT gap (measured - pdsim) on a request's measured lifetime over the
    concurrency, OSL x measured TPOT / C, per group of fit rows of one benchmark protocol,
    backend, mode and concurrency with at least ``LIFETIME_MIN_ROWS`` rows (question 3 of
    the module docstring)."""
    groups: dict[tuple[str, int], list[tuple[float, float]]] = collections.defaultdict(list)
    for s in scores:
        f = fields.get(s["row_id"])
        if f is None:
            continue
        protocol = row_protocol(SiliconRow(f))
        backend, mode = s["partition"].split()[:2]
        x = s["osl"] * s["measured_tpot_ms"] / s["concurrency"]
        groups[(f"{protocol} {backend} {mode}", s["concurrency"])].append(
            (x, s["measured_ttft_ms"] - s["pdsim_ttft_ms"]))
    out = []
    for (name, c), pts in sorted(groups.items()):
        if len(pts) < LIFETIME_MIN_ROWS:
            continue
        x, y = np.array(pts).T
        if np.ptp(x) == 0:
            continue
        slope, intercept = np.polyfit(x, y, 1)
        resid = y - (intercept + slope * x)
        total = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float((resid ** 2).sum()) / total if total > 0 else 1.0
        out.append((name, c, len(pts), float(intercept), float(slope), r2))
    return out


def fit_frontend_latency(scores: list[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    """Per backend, (median measured - pdsim TTFT in seconds, rows) over the fit rows at
    C <= LOW_CONCURRENCY scored without a frontend latency: the per-request cost on the
    way in that the rows show where queueing and waves are smallest."""
    gaps: dict[str, list[float]] = collections.defaultdict(list)
    for s in fit_scores(scores):
        if s["concurrency"] <= LOW_CONCURRENCY:
            gaps[s["partition"].split()[0]].append(
                (s["measured_ttft_ms"] - s["pdsim_ttft_ms"]) / 1e3)
    return {b: (float(np.median(v)), len(v)) for b, v in sorted(gaps.items())}


MAX_RESPONSE_TOKENS = 64
"""The largest first-response delay (engine steps; one output token each without
speculation) the fit tries."""


def response_ttft_ms(score: dict[str, Any], steps: int) -> float:
    """A row's pdsim TTFT (scored with no first-response delay) had its client's first
    response come ``steps`` of the request's engine steps after its first token: what
    ``router.first_response_delay_steps`` makes of it (pdsim.results.first_response_s; the
    delay does not change the engine, so this is exact without speculation; under
    speculation the steps are priced at the row's mean tokens per step,
    ``pdsim_tokens_per_step``, a close approximation)."""
    per_token = score["pdsim_tpot_ms"]
    tokens = steps * score.get("pdsim_tokens_per_step", 1.0)
    return float(score["pdsim_ttft_ms"] + min(tokens, score["osl"] - 1) * per_token)


RESPONSE_GROUPINGS = ("backend", "backend+profile")
"""The ways a first-response delay may be shared: one per serving stack, or one per stack
and shipped model profile (a profile without fit rows takes its stack's)."""

CV_FOLDS = 5
"""Folds of the cross-validation that chooses the grouping."""


def response_key(score: dict[str, Any], grouping: str) -> str:
    """The delay a fit row shares under ``grouping``: its backend, or its backend and its
    model profile ("trtllm deepseek-v3")."""
    backend = str(score["partition"]).split()[0]
    if grouping == "backend":
        return backend
    return f"{backend} {MODEL_PROFILES.get(score['model'], score['model'])}"


def _best_delay(rows: list[dict[str, Any]]) -> tuple[int, float, float]:
    """(delay steps, mean TTFT error at none, at the delay) minimising the mean absolute
    percentage error of TTFT over ``rows`` (scored with no delay)."""
    meas = np.array([r["measured_ttft_ms"] for r in rows])
    errors = [float(np.mean(np.abs(np.array([response_ttft_ms(r, k) for r in rows]) - meas)
                            / meas) * 100) for k in range(MAX_RESPONSE_TOKENS + 1)]
    best = int(np.argmin(errors))
    return best, errors[0], errors[best]


def fit_first_response(scores: list[dict[str, Any]], grouping: str = "backend"
                       ) -> dict[str, tuple[int, int, float, float]]:
    """Per backend (or per backend and model profile, ``grouping``), (delay steps, rows,
    mean TTFT error before, after): the whole number of the request's engine steps after
    its first token at which the client's first response arrives that minimises the mean
    absolute percentage error of TTFT over the fit rows (``fit_scores``) scored with no
    delay."""
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for s in fit_scores(scores):
        by[response_key(s, grouping)].append(s)
    out = {}
    for key, rows in sorted(by.items()):
        best, before, after = _best_delay(rows)
        out[key] = (best, len(rows), before, after)
    return out


def response_fold(score: dict[str, Any]) -> int:
    """The cross-validation fold of a fit row: rows of one deployment family (partition,
    model, ISL and OSL) share a fold, so a fold's rows are predicted by delays fitted to
    other deployments."""
    key = f"{score['partition']}|{score['model']}|{score['isl']}|{score['osl']}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % CV_FOLDS


def cross_validate_first_response(scores: list[dict[str, Any]]
                                  ) -> dict[str, tuple[float, float, int]]:
    """Per grouping (``RESPONSE_GROUPINGS``), the (mean, median) TTFT error and the row
    count of each fit row predicted by the delays fitted to the other folds' fit rows (a
    key the other folds lack takes its backend's delay): how well a grouping carries to
    deployments it was not fitted to, the test that chooses it."""
    rows = fit_scores(scores)
    errors: dict[str, list[float]] = {g: [] for g in RESPONSE_GROUPINGS}
    for fold in range(CV_FOLDS):
        train = [r for r in rows if response_fold(r) != fold]
        test = [r for r in rows if response_fold(r) == fold]
        backend = {k: v[0] for k, v in fit_first_response(train).items()}
        for grouping in RESPONSE_GROUPINGS:
            table = {k: v[0] for k, v in fit_first_response(train, grouping).items()}
            for r in test:
                k = table.get(response_key(r, grouping),
                              backend.get(response_key(r, "backend"), 0))
                errors[grouping].append(abs(response_ttft_ms(r, k) - r["measured_ttft_ms"])
                                        / r["measured_ttft_ms"] * 100)
    return {g: (float(np.mean(e)), float(np.median(e)), len(e)) for g, e in errors.items()}


def score_fit_rows_without_response_delay(sample: int) -> list[dict[str, Any]]:
    """Score the fit rows of the suite's stratified sample of ``sample`` expressible rows
    (``python -m validation.silicon --sample N`` draws the same rows; held-out rows are
    not simulated) with no first-response delay: the rows ``fit_first_response`` reads."""

    from validation import silicon as S

    rows = []
    for row in S.load_sample():
        try:
            S.plan_row(row)
        except S.NotExpressible:
            continue
        rows.append(row)
    with _emptied(S.RESPONSE_RULES):
        return _score_fit_rows(S.stratified_sample(rows, sample))


def score_low_concurrency_fit_rows() -> list[dict[str, Any]]:
    """Score every expressible fit row at C <= LOW_CONCURRENCY with no frontend latency
    (the rows ``fit_frontend_latency`` reads)."""

    from validation import silicon as S

    with _emptied(S.FRONTEND_LATENCY_S):
        return _score_fit_rows(S.load_sample(), max_concurrency=LOW_CONCURRENCY)


@contextmanager
def _emptied(table: dict[str, Any]) -> Iterator[None]:
    """``table`` (one of the suite's per-backend tables) empty inside the block, restored
    after it."""
    saved = dict(table)
    table.clear()
    try:
        yield
    finally:
        table.update(saved)


def _score_fit_rows(rows: Iterable[Any], max_concurrency: int | None = None
                    ) -> list[dict[str, Any]]:
    """The scores (as dicts) of the expressible fit rows of ``rows``, those at most at
    ``max_concurrency`` when it is given."""
    from dataclasses import asdict

    from validation import silicon as S

    out = []
    for row in rows:
        if row.split != "fit":
            continue
        try:
            if max_concurrency is not None and S.plan_row(row).concurrency > max_concurrency:
                continue
            out.append(asdict(S.score_row(row)))
        except S.NotExpressible:
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.silicon_gap", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scores", type=Path, nargs="?",
                    help="JSON of `python -m validation.silicon --json`")
    ap.add_argument("--csv", type=Path, default=CSV_PATH)
    ap.add_argument("--fit-frontend", action="store_true",
                    help="score the fit rows at C <= 8 without a frontend latency and print "
                         "each backend's fitted frontend_latency_s")
    ap.add_argument("--fit-response", type=int, metavar="N",
                    help="score the fit rows of the suite's stratified sample of N rows "
                         "without a first-response delay and print each backend's fitted "
                         "first_response_delay_steps")
    args = ap.parse_args(argv)
    if args.fit_response is not None:
        if args.fit_response <= 0:
            print("error: --fit-response: give a positive number of rows", file=sys.stderr)
            return 2
        scored = score_fit_rows_without_response_delay(args.fit_response)
        for grouping in RESPONSE_GROUPINGS:
            print(f"per {grouping}:")
            for key, (tokens, n, before, after) in fit_first_response(scored,
                                                                      grouping).items():
                print(f"  {key}: first_response_delay_steps {tokens} ({n} fit rows; mean "
                      f"TTFT error {before:.1f}% without, {after:.1f}% with)")
        print(f"{CV_FOLDS}-fold cross-validation on the fit rows (folds by deployment):")
        for grouping, (mean, median, n) in cross_validate_first_response(scored).items():
            print(f"  per {grouping}: TTFT mean {mean:.1f}%, median {median:.1f}% ({n} rows)")
        return 0
    if args.fit_frontend:
        for backend, (latency, n) in fit_frontend_latency(
                score_low_concurrency_fit_rows()).items():
            print(f"{backend}: frontend_latency_s {latency:.3f} (median of {n} fit rows)")
        return 0
    if args.scores is None:
        print("error: scores: give a scores JSON or --fit-frontend", file=sys.stderr)
        return 2
    try:
        scores = json.loads(args.scores.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: {args.scores}: {exc}", file=sys.stderr)
        return 2
    fields = {r.id: r.fields for r in load_sample(args.csv)}
    try:
        fit = [s for s in fit_scores(scores) if s["row_id"] in fields]
    except (KeyError, TypeError) as exc:
        print(f"error: {args.scores}: not a list of scored rows ({exc!r} missing or wrong)",
              file=sys.stderr)
        return 2
    print(f"{len(fit)} fit rows without preemptions\n")
    print(f"Gap at C <= {LOW_CONCURRENCY} (measured - pdsim, medians):")
    print("| partition | model | ISL | rows | gap ms | measured ms | pdsim ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for part, model, isl, n, gap, meas, sim in low_concurrency_gaps(fit):
        print(f"| {part} | {model} | {isl} | {n} | {gap:.0f} | {meas:.0f} | {sim:.0f} |")
    print("\nTTFT ~ C^b within fixed deployments (medians):")
    print("| backend mode | deployments | b measured | b pdsim | measured/pdsim at lowest C |")
    print("|---|---:|---:|---:|---:|")
    for name, n, b_meas, b_sim, ratio in concurrency_exponents(fit, fields):
        print(f"| {name} | {n} | {b_meas:.2f} | {b_sim:.2f} | {ratio:.2f} |")
    print("\nGap = a + s x lifetime / C (lifetime = OSL x measured TPOT), per concurrency:")
    print("| protocol backend mode | C | rows | a ms | s | R^2 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, c, n, a, slope, r2 in lifetime_slopes(fit, fields):
        print(f"| {name} | {c} | {n} | {a:.0f} | {slope:.2f} | {r2:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
