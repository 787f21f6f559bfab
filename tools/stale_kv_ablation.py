"""Ablation of the pollution rules before the fix (docs/mtp-model.md prints its table).

Runs ``configs/inkling_small_pd_mtp8.yaml`` before the fix (``prefill_backoff: off``) with
every rule on, each rule off alone, and all off, plus the after-fix and colocated runs
for reference, and prints a markdown table of acceptance length and rate.
Run: ``python tools/stale_kv_ablation.py`` (about 20 s).
"""

from __future__ import annotations

import argparse

import pdsim
from pdsim.compare import variant
from pdsim.config import Role

RULES = {
    "unverified_draft_slots": "P's unverified draft slots reach D (PR #55055)",
    "reprefill_cache_shortfall": "D's re-prefill cache starts short (inference)",
    "garbage_into_every_module": "garbage re-prefills reach module 0 too (inference)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="configs/inkling_small_pd_mtp8.yaml")
    args = ap.parse_args()
    base = pdsim.load_config(args.config)
    before = variant(base, connector__prefill_backoff="off")
    runs: list[tuple[str, pdsim.SimConfig]] = [("before the fix, every rule on", before)]
    for rule, what in RULES.items():
        runs.append((f"without: {what}",
                     variant(before, **{f"speculative__stale_kv__{rule}": False})))
    runs.append(("before the fix, every rule off",
                 variant(before, **{f"speculative__stale_kv__{r}": False for r in RULES})))
    runs.append(("after the fix (backoff N-1)",
                 variant(base, connector__prefill_backoff="auto")))
    c = base.cluster
    co = c.single(Role.DECODE, "the colocated run").model_dump(mode="json")
    co["count"] = c.count(Role.PREFILL) + c.count(Role.DECODE)
    runs.append(("colocated (standalone)",
                 variant(base, cluster__mode="colocated", cluster__colocated=co)))
    print("| run | acceptance length | acceptance rate (%) |")
    print("|---|---|---|")
    for label, cfg in runs:
        s = pdsim.simulate(cfg).summary
        print(f"| {label} | {s['acceptance_length']:.3f} | {100 * s['acceptance_rate']:.2f} |")


if __name__ == "__main__":
    main()
