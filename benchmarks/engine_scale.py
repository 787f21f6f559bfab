"""Engine scale: open-loop Poisson arrivals at light and heavy load, memory and speed.

The workload of issue 19: ISL 2048 / OSL 256, MTP-3 (configs/mtp3.yaml with
``engine_speed.py``'s 1P1D overrides: decode ``max_num_seqs`` 64, prefill 4 us a token).
Light load is 1 req/s (D's batch holds 1.7 requests on average, and each request pays
about 46 engine steps of its own); heavy load is 20 req/s, near the single P's capacity
(about 22 req/s: at 40 req/s the queue grows without bound). Points: light load at 1k,
10k and 100k requests (and 1M with ``--million``), heavy load at 1k, 10k and 100k.

Every point runs in a fresh subprocess (``engine_speed.measure``): wall and CPU time of
``pdsim.simulate``, peak RSS (``ru_maxrss``, the process's high-water mark, so it includes
the interpreter and imports, ``baseline_rss_mb``), and a bare SimPy loop of the same
number of engine steps timed in the same process right after (``ratio_to_bare_simpy``).
Runs keep the step log's aggregates only (``engine.record_steps: aggregates``, what
``pdsim run`` without ``--out``, summary-only sweep points and ``pdsim search`` keep);
``--record-steps full`` measures what ``simulate()`` keeps by default (every column, for
time series and timelines). ``--instructions`` also counts instructions per request at
each load with valgrind's callgrind (``engine_speed.instructions_per_request``: LO and HI
requests, the difference over HI - LO).

    .venv/bin/python benchmarks/engine_scale.py --instructions
    .venv/bin/python benchmarks/engine_scale.py --million --only 1000000 --name engine_scale_1m
    .venv/bin/python benchmarks/engine_scale.py --record-steps full --only 100000
    .venv/bin/python benchmarks/engine_scale.py --light 300000 --only 300000 --name scale_300k

Writes ``results/engine_scale.csv`` and ``results/engine_scale.txt`` (``--name``: others).
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
from typing import Any

from _bench import RESULTS, provenance
from engine_speed import instructions_per_request, measure

PROMPT_TOKENS = 2048
OUTPUT_TOKENS = 256
LOADS = {"light": 1.0, "heavy": 20.0}
TARGET_PEAK_MB_100K = 300.0  # issue 30 (issue 19 asked 400)
TARGET_PEAK_MB_1M_LIGHT = 2048.0
COLUMNS = ("load", "rate_per_s", "num_requests", "record_steps", "wall_s", "cpu_s",
           "requests_per_wall_s", "engine_steps", "bare_simpy_s", "ratio_to_bare_simpy",
           "cpu_ratio_to_bare_simpy", "peak_rss_mb", "baseline_rss_mb",
           "rss_per_request_kb", "d_mean_batch", "mean_ttft_s", "completed")


def extra(record_steps: str) -> list[str]:
    return [f"workload.prompt_tokens={{kind: fixed, tokens: {PROMPT_TOKENS}}}",
            f"engine.record_steps={record_steps}"]


def points(million: bool, only: list[int], light_extra: tuple[int, ...] = ()
           ) -> list[tuple[str, int]]:
    light = sorted({1_000, 10_000, 100_000, *light_extra, *([1_000_000] if million else [])})
    out = [("light", n) for n in light] + [("heavy", n) for n in (1_000, 10_000, 100_000)]
    return [(load, n) for load, n in out if not only or n in only]


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's memory targets, each with its measured figure."""
    by = {(r["load"], r["num_requests"]): r for r in rows}
    out = []
    for load in LOADS:
        if (r := by.get((load, 100_000))) is not None:
            ok = r["peak_rss_mb"] <= TARGET_PEAK_MB_100K
            out.append(f"{load} load, 100k requests: peak RSS {r['peak_rss_mb']:.0f} MiB "
                       f"(target <= {TARGET_PEAK_MB_100K:.0f}): {'MET' if ok else 'NOT MET'}")
    if (r := by.get(("light", 1_000_000))) is not None:
        ok = r["peak_rss_mb"] <= TARGET_PEAK_MB_1M_LIGHT
        out.append(f"light load, 1M requests: peak RSS {r['peak_rss_mb']:.0f} MiB "
                   f"(target <= {TARGET_PEAK_MB_1M_LIGHT:.0f}): {'MET' if ok else 'NOT MET'}")
        if (a := by.get(("light", 100_000))) is not None:
            out.append(f"light load, RSS above the interpreter per request: "
                       f"{a['rss_per_request_kb']:.2f} KiB at 100k, "
                       f"{r['rss_per_request_kb']:.2f} KiB at 1M")
    return out


def write_csv(rows: list[dict[str, Any]], name: str) -> None:
    from pdsim.output import write_atomic

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{r[k]:.4g}" if isinstance(r[k], float) else r[k]) for k in COLUMNS})
    write_atomic(RESULTS / f"{name}.csv", buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--million", action="store_true", help="add 1M requests at light load")
    ap.add_argument("--only", type=int, action="append", default=[], metavar="N",
                    help="run only the points with N requests (repeatable)")
    ap.add_argument("--light", type=int, action="append", default=[], metavar="N",
                    help="add a light-load point of N requests (repeatable; with --only N "
                         "to run it alone), e.g. 300000 for the slope from 100k")
    ap.add_argument("--record-steps", choices=("aggregates", "full"), default="aggregates")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per request with valgrind's callgrind")
    ap.add_argument("--name", default="engine_scale",
                    help="write results/NAME.csv and .txt (default engine_scale)")
    ap.add_argument("--instr-requests", nargs=2, type=int, default=(1024, 3072),
                    metavar=("LO", "HI"), help="the two runs --instructions compares")
    args = ap.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        ap.error("--instructions needs valgrind (apt-get install valgrind)")
    rows = []
    print(f"{'load':>6} {'requests':>9} {'wall s':>8} {'cpu s':>8} {'steps':>9} "
          f"{'bare s':>7} {'ratio':>6} {'cpu ratio':>9} {'peak MiB':>9} {'KiB/req':>8}")
    for load, n in points(args.million, args.only, tuple(args.light)):
        r = measure(n, OUTPUT_TOKENS, LOADS[load], extra(args.record_steps))
        r.update(load=load, rate_per_s=LOADS[load], record_steps=args.record_steps,
                 rss_per_request_kb=(r["peak_rss_mb"] - r["baseline_rss_mb"]) * 1024 / n)
        rows.append(r)
        print(f"{load:>6} {n:>9} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
              f"{r['engine_steps']:>9} {r['bare_simpy_s']:>7.3f} "
              f"{r['ratio_to_bare_simpy']:>6.1f} {r['cpu_ratio_to_bare_simpy']:>9.1f} "
              f"{r['peak_rss_mb']:>9.0f} {r['rss_per_request_kb']:>8.2f}", flush=True)
    write_csv(rows, args.name)
    lines = verdicts(rows)
    if args.instructions:
        lo, hi = args.instr_requests
        for load, rate in LOADS.items():
            per = instructions_per_request(lo, hi, OUTPUT_TOKENS, rate,
                                           extra(args.record_steps))
            lines.append(f"{load} load ({rate:g} req/s): {per / 1e6:.3f} M instructions per "
                         f"request (callgrind, {lo} vs {hi} requests)")
    prov = provenance()
    lines.append(f"{prov['date']}, commit {prov['commit']}, Python {prov['python']}, "
                 f"{prov['machine']}, record_steps {args.record_steps}")
    from pdsim.output import write_atomic

    write_atomic(RESULTS / f"{args.name}.txt", "\n".join(lines) + "\n")
    print()
    print("\n".join(lines))
    print(f"wrote {RESULTS / args.name}.csv and .txt")


if __name__ == "__main__":
    main()
