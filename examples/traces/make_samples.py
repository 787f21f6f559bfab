"""Write pdsim's shipped sample traces: small, synthetic, deterministic.

    python examples/traces/make_samples.py [--out-dir pdsim/data/traces] [--rows 200]

Neither file holds real traffic. They only have the shape of the public formats, so that
examples and tests can replay a trace without downloading one:

* ``mooncake_sample.jsonl``: Mooncake JSONL, ``timestamp`` in ms, ``input_length``,
  ``output_length`` and ``hash_ids`` (one id per 512-token block). Prompts open with one of
  a few shared "system prompt" prefixes, so a prefix cache has something to hit.
* ``azure_sample.csv``: Azure LLM inference CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens``,
  timestamps starting at 2000-01-01 00:00:00 (a date no real trace has).

Only ``random.Random.random()`` is used (with explicit transforms), whose sequence Python
guarantees across versions, so rerunning the script reproduces the files byte for byte
(tests/workload checks that).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
from pathlib import Path

SEED = 20240501
HASH_BLOCK_TOKENS = 512
ROWS = 200
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "pdsim" / "data" / "traces"


def _exponential(rng: random.Random, mean: float) -> float:
    return -mean * math.log(1.0 - rng.random())


def _lognormal(rng: random.Random, mean: float, cv: float) -> float:
    sigma2 = math.log1p(cv * cv)
    mu = math.log(mean) - sigma2 / 2
    # Box-Muller, one normal per pair of uniforms.
    u1, u2 = 1.0 - rng.random(), rng.random()
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    return math.exp(mu + math.sqrt(sigma2) * z)


def _bursty_gaps_s(rng: random.Random, n: int, rate_per_s: float) -> list[float]:
    """Gaps with on/off bursts: a hyperexponential mix, mean ``1 / rate_per_s``."""
    gaps = []
    for _ in range(n):
        burst = rng.random() < 0.7
        gaps.append(_exponential(rng, (0.3 if burst else 2.633) / rate_per_s))
    return gaps


def mooncake_rows(n: int = ROWS, seed: int = SEED) -> list[dict[str, object]]:
    rng = random.Random(seed)
    # Shared prefixes: 6 "system prompts" of 1..8 blocks, ids 0..; unique blocks after.
    prefixes: list[list[int]] = []
    next_id = 0
    for _ in range(6):
        size = 1 + int(rng.random() * 8)
        prefixes.append(list(range(next_id, next_id + size)))
        next_id += size
    rows = []
    t_ms = 0.0
    gaps = _bursty_gaps_s(rng, n, rate_per_s=2.0)
    for gap_s in gaps:
        t_ms += gap_s * 1000.0
        input_length = max(1, min(60000, round(_lognormal(rng, 6000.0, 1.0))))
        output_length = max(1, min(4000, round(_lognormal(rng, 250.0, 1.2))))
        num_blocks = -(-input_length // HASH_BLOCK_TOKENS)
        prefix = prefixes[int(rng.random() * len(prefixes))][:num_blocks]
        unique = list(range(next_id, next_id + num_blocks - len(prefix)))
        next_id += len(unique)
        rows.append({"timestamp": round(t_ms), "input_length": input_length,
                     "output_length": output_length, "hash_ids": prefix + unique})
    return rows


def azure_rows(n: int = ROWS, seed: int = SEED + 1) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    start = dt.datetime(2000, 1, 1)
    t_ticks = 0  # 100 ns ticks, the resolution of the Azure traces
    rows = []
    for gap_s in _bursty_gaps_s(rng, n, rate_per_s=3.0):
        t_ticks += round(gap_s * 1e7)
        when = start + dt.timedelta(microseconds=t_ticks // 10)
        stamp = when.strftime("%Y-%m-%d %H:%M:%S") + f".{t_ticks % 10_000_000:07d}"
        context = max(1, min(30000, round(_lognormal(rng, 2000.0, 1.3))))
        generated = max(1, min(2000, round(_lognormal(rng, 200.0, 1.0))))
        rows.append((stamp, context, generated))
    return rows


def write_samples(out_dir: Path, n: int = ROWS) -> tuple[Path, Path]:
    """Write both samples into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mooncake = out_dir / "mooncake_sample.jsonl"
    with open(mooncake, "w", encoding="utf-8", newline="\n") as fh:
        for row in mooncake_rows(n):
            fh.write(json.dumps(row) + "\n")
    azure = out_dir / "azure_sample.csv"
    with open(azure, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for stamp, context, generated in azure_rows(n):
            fh.write(f"{stamp},{context},{generated}\n")
    return mooncake, azure


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)
    for path in write_samples(args.out_dir, args.rows):
        print(path)


if __name__ == "__main__":
    main()
