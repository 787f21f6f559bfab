"""Before/after the fix: the same workload and random streams under backoff off and auto.

Paired: every variant uses the config's seed, so arrivals, lengths and the acceptance
stream's uniforms are the same; only the mechanism differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdsim.config import Role, SimConfig
from pdsim.loader import apply_overrides, config_from_dict
from pdsim.results import Results
from pdsim.simulation import ProgressFn, simulate

COMPARE_METRICS: tuple[tuple[str, str, float], ...] = (
    # (summary key, label, display scale)
    ("acceptance_length", "acceptance length", 1.0),
    ("acceptance_rate", "acceptance rate (%)", 100.0),
    ("output_throughput_tok_s", "output throughput (tok/s)", 1.0),
    ("mean_tpot_s", "mean TPOT (ms)", 1e3),
    ("p50_tpot_s", "p50 TPOT (ms)", 1e3),
    ("mean_ttft_s", "mean TTFT (ms)", 1e3),
    ("p50_ttft_s", "p50 TTFT (ms)", 1e3),
    ("p99_ttft_s", "p99 TTFT (ms)", 1e3),
    ("mean_itl_s", "mean ITL (ms)", 1e3),
    ("mean_e2e_s", "mean E2E (s)", 1.0),
    ("tokens_recomputed_on_d", "tokens recomputed on D", 1.0),
    ("kv_bytes_transferred", "KV transferred (GB)", 1e-9),
)


@dataclass
class Comparison:
    """Results of each variant, by name (``pd_before_fix``, ``pd_after_fix``, ...)."""

    variants: dict[str, Results]

    def table(self) -> list[dict[str, Any]]:
        """One row per metric: the value of each variant (display units)."""
        rows = []
        for key, label, scale in COMPARE_METRICS:
            row: dict[str, Any] = {"metric": label, "key": key}
            for name, res in self.variants.items():
                v = res.summary.get(key)
                row[name] = None if v is None else float(v) * scale
            rows.append(row)
        n = max((len(r.summary["per_position_acceptance_rates"])
                 for r in self.variants.values()), default=0)
        for i in range(n):
            row = {"metric": f"per-position rate {i} (%)", "key": f"per_position_{i}"}
            for name, res in self.variants.items():
                rates = res.summary["per_position_acceptance_rates"]
                row[name] = rates[i] * 100.0 if i < len(rates) else None
            rows.append(row)
        return rows

    def headline(self) -> dict[str, float]:
        """After vs before: the seed report's three headline figures."""
        before = self.variants["pd_before_fix"].summary
        after = self.variants["pd_after_fix"].summary
        return {
            "acceptance_rate_change_points": (after.spec_decode.acceptance_rate
                                              - before.spec_decode.acceptance_rate) * 100.0,
            "output_throughput_change_pct": (after.output_throughput_tok_s
                                             / before.output_throughput_tok_s - 1) * 100,
            "tpot_change_pct": (after.tpot.mean_s / before.tpot.mean_s - 1) * 100,
            "acceptance_length_before": before.spec_decode.acceptance_length,
            "acceptance_length_after": after.spec_decode.acceptance_length,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "headline": self.headline(),
            "table": self.table(),
            "summaries": {k: v.summary.as_dict() for k, v in self.variants.items()},
        }


def variant(cfg: SimConfig, **changes: Any) -> SimConfig:
    """``cfg`` with changes applied (``section__key=value`` for ``section.key``), validated
    again; the same override mechanism as ``--set``."""
    overrides = [f"{key.replace('__', '.')}={json.dumps(value)}"
                 for key, value in changes.items()]
    return config_from_dict(apply_overrides(cfg.model_dump(mode="json"), overrides))


def variant_configs(cfg: SimConfig, colocated: bool = False) -> dict[str, SimConfig]:
    """The configs ``compare`` simulates, by variant name: P/D before the fix, after it,
    and optionally colocated (standalone) on the same instances."""
    out = {
        "pd_before_fix": variant(cfg, connector__prefill_backoff="off"),
        "pd_after_fix": variant(cfg, connector__prefill_backoff="auto"),
    }
    if colocated:
        c = cfg.cluster
        count = c.count(Role.PREFILL) + c.count(Role.DECODE)
        co = c.single(Role.DECODE, "the colocated variant").model_dump(mode="json")
        co["count"] = count
        out["colocated"] = variant(cfg, cluster__mode="colocated", cluster__colocated=co)
    return out


def compare(cfg: SimConfig, colocated: bool = False,
            progress: ProgressFn | None = None) -> Comparison:
    """Simulate P/D before the fix, after it, and optionally colocated (standalone).

    ``progress`` is called with ``(done, total)`` requests of each variant in turn (the
    CLI shows one progress line per variant instead, see ``pdsim.cli.compare``)."""
    return Comparison({name: simulate(vcfg, progress=progress)
                       for name, vcfg in variant_configs(cfg, colocated).items()})
