"""The P/D pollution of multi-module MTP KV, mechanism by mechanism (docs/mtp-model.md).

Regenerates the tables of docs/mtp-model.md's "Consequences" section and a plot, on
``configs/inkling_small_pd_mtp8.yaml`` (Inkling-Small, MTP-8, 1P1D, concurrency 64) with
the shipped stale-KV defaults:

1. ablation: the padded first step (M1) and the unpadded first verification (M2) apart and
   together, before and after the fix, colocated;
2. acceptance length before and after the fix against concurrency (1, 2, 4, 16, 64);
3. against the number of MTP modules (N = 2, 3, 5, 8; Inkling's first N rates);
4. single-module drafters under P/D before the fix (MTP-1, and EAGLE-3 on
   ``configs/eagle3_llama70b.yaml``), with and without the padded round's metric artefact;
5. every path at acceptance 1 (constant rate 1.0), where closed forms say what each gives.

Writes ``results/pd_pollution.md`` and ``results/pd_pollution.png`` and prints the tables.

    .venv/bin/python benchmarks/pd_pollution.py [--requests 640]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _bench import RESULTS, ROOT, provenance

import pdsim
from pdsim.compare import variant, variant_configs
from pdsim.config import SimConfig
from pdsim.output import write_atomic

INKLING = ROOT / "configs" / "inkling_small_pd_mtp8.yaml"
EAGLE = ROOT / "configs" / "eagle3_llama70b.yaml"
CONCURRENCIES = (1, 2, 4, 16, 64)
MODULES = (2, 3, 5, 8)


def colocated(cfg: SimConfig) -> SimConfig:
    """The same instances serving colocated, as ``pdsim compare --colocated`` runs them."""
    return variant_configs(cfg, colocated=True)["colocated"]


def stats(res: pdsim.Results, rows: Callable[[dict[str, Any]], np.ndarray] | None = None
          ) -> dict[str, float]:
    """Acceptance length (vLLM's, placeholder rounds included), the same without the padded
    rounds, and the share of requests padded, over the records ``rows`` selects."""
    cols = res.records.columns
    keep = np.ones(len(cols["num_drafts"]), dtype=bool) if rows is None else rows(cols)
    drafts = cols["num_drafts"][keep].sum()
    padded = cols["padded_first_steps"][keep].sum()
    accepted = cols["num_accepted_tokens"][keep].sum()
    return {"length": 1 + accepted / drafts if drafts else float("nan"),
            "length_unpadded_rounds": (1 + accepted / (drafts - padded)
                                       if drafts > padded else float("nan")),
            "padded_share": float(np.mean(cols["padded_first_steps"][keep] > 0))
            if keep.any() else float("nan"),
            "requests": int(keep.sum())}


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def f3(x: float) -> str:
    return "-" if x != x else f"{x:.3f}"


def pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f}%"


def ablation(base: SimConfig) -> str:
    before = variant(base, connector__prefill_backoff="off")
    both = pdsim.simulate(before)
    m2 = pdsim.simulate(variant(before, speculative__pad_first_decode_step=False))
    clean_cache = pdsim.simulate(
        variant(before, speculative__stale_kv__reprefill_cache_shortfall=False))
    after = pdsim.simulate(variant(base, connector__prefill_backoff="auto"))
    co = pdsim.simulate(colocated(base))

    def padded(c: dict[str, Any]) -> np.ndarray:
        return np.asarray(c["padded_first_steps"] > 0)

    def unpadded(c: dict[str, Any]) -> np.ndarray:
        return np.asarray(c["padded_first_steps"] == 0)

    rows = [
        ("before the fix, as vLLM's code runs it (M1 and M2)", stats(both)),
        ("  its padded requests (M1)", stats(both, padded)),
        ("  its unpadded requests (M2: D idle or a prefill in the step)", stats(both, unpadded)),
        ("before the fix, padding off (M2 alone: dynamic speculation)", stats(m2)),
        ("before the fix, re-prefill cache full (neither: ablation)", stats(clean_cache)),
        ("after the fix (backoff N-1: the residual alone)", stats(after)),
        ("colocated (standalone)", stats(co)),
    ]
    return table(["run", "acceptance length", "without the placeholder rounds",
                  "requests padded", "requests"],
                 [[label, f3(s["length"]), f3(s["length_unpadded_rounds"]),
                   pct(s["padded_share"]), str(s["requests"])] for label, s in rows])


def by_concurrency(base: SimConfig) -> tuple[str, dict[str, list[float]]]:
    curves: dict[str, list[float]] = {"before the fix": [], "after the fix": []}
    rows = []
    for c in CONCURRENCIES:
        cfg = variant(base, workload__arrivals={"kind": "closed_loop", "concurrency": c})
        b = stats(pdsim.simulate(variant(cfg, connector__prefill_backoff="off")))
        a = stats(pdsim.simulate(variant(cfg, connector__prefill_backoff="auto")))
        curves["before the fix"].append(b["length"])
        curves["after the fix"].append(a["length"])
        rows.append([str(c), f3(b["length"]), pct(b["padded_share"]), f3(a["length"]),
                     pct(a["padded_share"])])
    return table(["concurrency", "before the fix", "padded", "after the fix", "padded"],
                 rows), curves


def by_modules(base: SimConfig) -> tuple[str, dict[str, list[float]]]:
    rates = list(base.speculative.acceptance.rates)  # type: ignore[union-attr]
    curves: dict[str, list[float]] = {"before the fix": [], "after the fix": [],
                                      "colocated": []}
    rows = []
    for n in MODULES:
        cfg = variant(base, speculative__num_speculative_tokens=n,
                      speculative__acceptance={"kind": "per_position", "rates": rates[:n]})
        b = stats(pdsim.simulate(variant(cfg, connector__prefill_backoff="off")))
        a = stats(pdsim.simulate(variant(cfg, connector__prefill_backoff="auto")))
        co = stats(pdsim.simulate(colocated(cfg)))
        for key, s in (("before the fix", b), ("after the fix", a), ("colocated", co)):
            curves[key].append(s["length"])
        rows.append([str(n), f3(b["length"]), f3(a["length"]), f3(co["length"])])
    return table(["N (modules)", "before the fix", "after the fix", "colocated"],
                 rows), curves


def single_module(base: SimConfig, requests: int) -> str:
    mtp1 = variant(base, speculative__num_speculative_tokens=1,
                   speculative__acceptance={"kind": "per_position", "rates": [0.8359]})
    eagle = pdsim.load_config(EAGLE, overrides=[f"workload.num_requests={requests}"])
    rows = []
    for label, cfg in (("MTP-1 (Inkling, rate 83.59%)", mtp1),
                       ("EAGLE-3, N = 3 (Llama-3.1-70B)", eagle)):
        b = stats(pdsim.simulate(variant(cfg, connector__prefill_backoff="off")))
        co = stats(pdsim.simulate(colocated(cfg)))
        rows.append([label, f3(co["length"]), f3(b["length"]),
                     f3(b["length_unpadded_rounds"]), pct(b["padded_share"]),
                     f"{100 * (b['length_unpadded_rounds'] / co['length'] - 1):+.1f}%"])
    return table(["drafter", "colocated", "P/D before the fix",
                  "the same without the placeholder rounds", "requests padded",
                  "change (without placeholders)"], rows)


def at_acceptance_one(base: SimConfig) -> str:
    n = base.speculative.num_speculative_tokens
    one = variant(base, speculative__acceptance={"kind": "constant", "rate": 1.0})
    before = pdsim.simulate(variant(one, connector__prefill_backoff="off"))
    beta = base.speculative.stale_kv.sensitivity_per_slot
    a = float(np.exp(-beta * (n - 1)))
    m1 = (1 - a ** (n + 1)) / (1 - a)

    def padded(c: dict[str, Any]) -> np.ndarray:
        return np.asarray(c["padded_first_steps"] > 0)

    def unpadded(c: dict[str, Any]) -> np.ndarray:
        return np.asarray(c["padded_first_steps"] == 0)

    rows = [
        ["colocated", f3(stats(pdsim.simulate(colocated(one)))["length"]), f"N + 1 = {n + 1}"],
        ["before the fix, padded (M1)", f3(stats(before, padded)["length_unpadded_rounds"]),
         f"(1 - a^(N+1)) / (1 - a), a = exp(-{beta} x (N - 1)): {m1:.3f}"],
        ["before the fix, unpadded (M2)", f3(stats(before, unpadded)["length"]),
         f"N + 1 = {n + 1} (nothing rejected, nothing repaired from garbage)"],
        ["after the fix (residual)", f3(stats(pdsim.simulate(variant(
            one, connector__prefill_backoff="auto")))["length"]),
         "below N + 1: P's guesses of its truncated prompt tokens are not drafts"],
    ]
    return table(["path", "acceptance length", "closed form"], rows)


def plot(conc: dict[str, list[float]], mods: dict[str, list[float]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, ys in conc.items():
        left.plot(CONCURRENCIES, ys, marker="o", label=label)
    left.set_xscale("log", base=2)
    left.set_xlabel("concurrency (closed loop)")
    left.set_ylabel("acceptance length")
    left.set_title("Inkling-Small MTP-8, 1P1D: against D's load")
    left.legend()
    for label, ys in mods.items():
        right.plot(MODULES, ys, marker="o", label=label)
    right.set_xlabel("MTP modules N")
    right.set_title("against the number of modules (concurrency 64)")
    right.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=640, help="requests per run")
    args = ap.parse_args()
    t0 = time.perf_counter()
    base = pdsim.load_config(INKLING, overrides=[f"workload.num_requests={args.requests}"])
    sections = [("Ablation (concurrency 64)", ablation(base))]
    conc_table, conc = by_concurrency(base)
    sections.append(("Against concurrency", conc_table))
    mod_table, mods = by_modules(base)
    sections.append(("Against the number of modules", mod_table))
    sections.append(("Single-module drafters before the fix",
                     single_module(base, args.requests)))
    sections.append(("At acceptance 1", at_acceptance_one(base)))
    prov = provenance()
    text = (f"pdsim {pdsim.__version__}, commit {prov['commit']}, {prov['date']}, "
            f"{args.requests} requests per run, seed 0, {time.perf_counter() - t0:.0f} s\n\n"
            + "\n\n".join(f"### {title}\n\n{body}" for title, body in sections) + "\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / "pd_pollution.md", text)
    write_atomic(RESULTS / "pd_pollution.png", plot(conc, mods))
    print(text)


if __name__ == "__main__":
    main()
