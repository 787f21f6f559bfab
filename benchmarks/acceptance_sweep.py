"""Acceptance sweep: throughput, TPOT and TTFT against the drafter's acceptance (alpha).

For the shipped P/D configs with multi-module MTP (``DEFAULT_CONFIGS``, or ``--config``),
three variants run on the same requests and random streams:

- ``pd_before_fix``: P/D with ``connector.prefill_backoff: off`` (vLLM before PR #55055);
- ``pd_after_fix``: P/D with ``prefill_backoff: auto`` (after it);
- ``colocated``: the same instances colocated (standalone serving), each configured like
  the config's decode instances (as ``pdsim compare --colocated`` does).

The drafter's clean acceptance is set to a constant conditional rate alpha per draft
(``speculative.acceptance: {kind: constant, rate: alpha}``) for alpha in ``--alphas``.
The sweep runs through ``pdsim.sweep`` with its cache under ``results/cache/``; every
point is simulated afresh unless ``--resume`` (the cache key holds pdsim's version, not
its code, and this benchmark exists to measure the current code). Writes
``results/acceptance_sweep.csv`` and ``results/acceptance_sweep.png`` (plus, per config,
``results/acceptance_sweep_<config>.png``: what ``pdsim plot`` draws for its sweep folder,
including the measured acceptance rate) and prints the figures.

    .venv/bin/python benchmarks/acceptance_sweep.py [--requests 300] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import time
from pathlib import Path
from typing import Any

from _bench import CACHE, RESULTS, ROOT, provenance

from pdsim.config import Role, SimConfig
from pdsim.loader import load_config
from pdsim.output import write_atomic
from pdsim.sweep import expand_points, parse_values, run_sweep
from pdsim.sweep_figures import write_sweep_plots

DEFAULT_CONFIGS = ("mtp3.yaml", "mtp3_2p2d.yaml", "inkling_small_pd_mtp8.yaml")
VARIANTS = ("pd_before_fix", "pd_after_fix", "colocated")
COLUMNS = ("config", "variant", "alpha", "acceptance_rate", "acceptance_length",
           "output_throughput_tok_s", "mean_tpot_s", "p50_tpot_s", "mean_ttft_s",
           "p50_ttft_s", "p99_ttft_s", "completed", "num_requests")


def mtp_configs() -> list[Path]:
    """The shipped P/D configs with multi-module MTP this benchmark reports on."""
    return [ROOT / "configs" / name for name in DEFAULT_CONFIGS
            if (ROOT / "configs" / name).is_file()]


def variant_points(cfg: SimConfig) -> list[dict[str, Any]]:
    """The three variants as sweep points (``name`` carries the variant label)."""
    c = cfg.cluster
    co = c.single(Role.DECODE, "the colocated variant").model_dump(mode="json")
    co["count"] = c.count(Role.PREFILL) + c.count(Role.DECODE)
    return [
        {"name": "pd_before_fix", "connector.prefill_backoff": "off"},
        {"name": "pd_after_fix", "connector.prefill_backoff": "auto"},
        {"name": "colocated", "cluster.mode": "colocated", "cluster.colocated": co},
    ]


def sweep_config(path: Path, alphas: list[float], requests: int, workers: int | None,
                 closed_loop: int | None = None, resume: bool = False
                 ) -> list[dict[str, Any]]:
    base = load_config(path)
    if not (base.use_multi_module_mtp and base.cluster.mode == "disaggregated"):
        raise SystemExit(f"{path}: needs multi-module MTP on a disaggregated cluster")
    cap = ("workload.trace.max_requests" if base.workload.trace is not None
           else "workload.num_requests")
    n = min(requests, base.workload.num_requests or requests)
    sets = [f"speculative.acceptance={{kind: constant, rate: {alphas[0]}}}", f"{cap}={n}"]
    if closed_loop is not None:
        sets.append(f"workload.arrivals={{kind: closed_loop, concurrency: {closed_loop}}}")
    cfg = load_config(path, sets)
    points = expand_points([("speculative.acceptance.rate", alphas)], variant_points(cfg))
    out_dir = CACHE / "acceptance_sweep" / path.stem
    rows = run_sweep(cfg, points, out_dir=out_dir, workers=workers, run_files=False,
                     force=not resume)
    # what `pdsim plot` draws for the sweep folder: every metric against alpha, per variant
    write_sweep_plots(out_dir, RESULTS, filename=f"acceptance_sweep_{path.stem}.png")
    return [{"config": path.stem, "variant": r["name"],
             "alpha": r["speculative.acceptance.rate"],
             **{c: r.get(c) for c in COLUMNS[3:]}} for r in rows]


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else r[k]) for k in COLUMNS})
    write_atomic(path, buf.getvalue())


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    panels = (("output_throughput_tok_s", "output throughput (tok/s)", 1.0),
              ("mean_tpot_s", "mean TPOT (ms)", 1e3), ("mean_ttft_s", "mean TTFT (ms)", 1e3))
    fig, axes = plt.subplots(len(configs), 3, figsize=(13, 3.4 * len(configs)),
                             squeeze=False)
    for i, name in enumerate(configs):
        for j, (key, label, scale) in enumerate(panels):
            ax = axes[i][j]
            for variant, style in zip(VARIANTS, ("o-", "s-", "^--"), strict=True):
                pts = [r for r in rows if r["config"] == name and r["variant"] == variant]
                ax.plot([r["alpha"] for r in pts],
                        [math.nan if r[key] is None else r[key] * scale for r in pts],
                        style, label=variant.replace("_", " "), ms=4)
            ax.set_xlabel("alpha (conditional acceptance per draft)")
            ax.set_ylabel(label)
            ax.set_title(f"{name}: {label.split(' (')[0]}", fontsize=10)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[i][0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def report(rows: list[dict[str, Any]]) -> None:
    """Per config and alpha: throughput of each variant and after/before."""
    for name in dict.fromkeys(r["config"] for r in rows):
        print(f"\n{name}")
        print(f"{'alpha':>6} {'acc len b/a/co':>20} {'out tok/s before':>17} "
              f"{'after':>9} {'colocated':>10} {'after/before':>13} {'TPOT ms b/a':>14}")
        by = {(r["variant"], r["alpha"]): r for r in rows if r["config"] == name}
        for alpha in sorted({r["alpha"] for r in rows if r["config"] == name}):
            b, a, c = (by[(v, alpha)] for v in VARIANTS)
            print(f"{alpha:>6.2f} {b['acceptance_length']:>6.2f} /{a['acceptance_length']:>5.2f}"
                  f" /{c['acceptance_length']:>5.2f} {b['output_throughput_tok_s']:>17.1f} "
                  f"{a['output_throughput_tok_s']:>9.1f} {c['output_throughput_tok_s']:>10.1f} "
                  f"{a['output_throughput_tok_s'] / b['output_throughput_tok_s']:>13.2f} "
                  f"{b['mean_tpot_s'] * 1e3:>6.2f} /{a['mean_tpot_s'] * 1e3:>6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", type=Path,
                    help="config file (repeatable; default: " + ", ".join(DEFAULT_CONFIGS) + ")")
    ap.add_argument("--alphas", default="0.3:0.9:0.1", help="values or start:stop:step")
    ap.add_argument("--requests", type=int, default=300,
                    help="requests per run at most (default 300)")
    ap.add_argument("--closed-loop", type=int, default=None, metavar="CONCURRENCY",
                    help="replace every config's arrivals by a closed loop of this many "
                         "clients (saturated: throughput then moves with alpha)")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse points cached by an earlier (interrupted) run; without it "
                         "every point is simulated again, since the cache key has pdsim's "
                         "version but not its code")
    args = ap.parse_args()
    alphas = [float(a) for a in parse_values(args.alphas, "--alphas")]
    paths = args.config or mtp_configs()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for path in paths:
        print(f"sweeping {path.name}: {len(VARIANTS)} variants x {len(alphas)} alphas")
        rows.extend(sweep_config(path, alphas, args.requests, args.workers,
                                 args.closed_loop, args.resume))
    write_csv(rows, RESULTS / "acceptance_sweep.csv")
    plot(rows, RESULTS / "acceptance_sweep.png")
    report(rows)
    prov = provenance()
    line = (f"{len(rows)} runs in {time.perf_counter() - t0:.1f} s wall; {prov['date']}, "
            f"commit {prov['commit']}, Python {prov['python']}, {prov['machine']}")
    write_atomic(RESULTS / "acceptance_sweep.txt", line + "\n")
    print(f"\n{line}")
    print(f"wrote {RESULTS / 'acceptance_sweep.csv'}, .png and .txt")


if __name__ == "__main__":
    main()
