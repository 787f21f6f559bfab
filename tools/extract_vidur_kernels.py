"""Extract the kernel timings pdsim fits its roofline to from a Vidur checkout.

Usage: python tools/extract_vidur_kernels.py VIDUR_REPO_DIR [COMMIT]

Reads ``data/profiling`` of microsoft/vidur (GEMM and elementwise kernel medians from
``compute/{h100,a100}/*/*/mlp.csv``: the four projection GEMMs; NCCL all-reduce medians from
``network/{h100,a100}_dgx/all_reduce.csv``) and writes
``pdsim/data/kernels/vidur_kernels.csv``: one row per (hardware, model, tensor parallel
size, token count, operator), with the GEMM shape (m x n x k) or the bytes moved.
Only numbers are carried over; times are Vidur's medians in microseconds.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "pdsim" / "data" / "kernels" / "vidur_kernels.csv"
HARDWARE = {"h100": "h100-sxm", "a100": "a100-sxm"}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
# all-reduce sizes: powers of two from 2 KiB to 128 MiB (Vidur's ``size`` column is bytes)
AR_BYTES = tuple(2**i for i in range(11, 28))
ACT_BYTES = 2  # Vidur profiles fp16


def _git_show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def _ls(repo: Path, commit: str, prefix: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", commit,
                          prefix], check=True, capture_output=True, text=True).stdout
    return out.split()


def _median_us(row: dict[str, str], op: str) -> float:
    return float(row[f"time_stats.{op}.median"]) * 1000.0  # Vidur stores milliseconds


def _gemm_rows(hw: str, model: str, row: dict[str, str]) -> list[list[object]]:
    m = int(row["num_tokens"])
    tp = int(row["num_tensor_parallel_workers"])
    h, ff = int(row["n_embd"]), int(row["n_expanded_embd"])
    heads, kv_heads = int(row["n_head"]), int(row["n_kv_head"])
    hd = h // heads
    up = (2 if row["use_gated_mlp"] == "True" else 1) * ff // tp
    shapes = {
        "attn_pre_proj": (m, (heads + 2 * kv_heads) * hd // tp, h),
        "attn_post_proj": (m, h, h // tp),
        "mlp_up_proj": (m, up, h),
        "mlp_down_proj": (m, h, ff // tp),
    }
    out: list[list[object]] = []
    for op, (mm, n, k) in shapes.items():
        out.append([HARDWARE[hw], model, tp, m, op, "gemm", mm, n, k, 0,
                    round(_median_us(row, op), 3)])
    return out


def main(repo: Path, commit: str) -> None:
    rows: list[list[object]] = []
    for hw in HARDWARE:
        for path in _ls(repo, commit, f"data/profiling/compute/{hw}"):
            if not path.endswith("/mlp.csv"):
                continue
            model = path.split("/")[-2]
            seen: dict[tuple[int, int], list[dict[str, str]]] = {}
            for row in csv.DictReader(_git_show(repo, commit, path).splitlines()):
                key = (int(row["num_tensor_parallel_workers"]), int(row["num_tokens"]))
                if key[1] in TOKENS:
                    seen.setdefault(key, []).append(row)
            for key in sorted(seen):
                rows.extend(_gemm_rows(hw, model, seen[key][0]))  # first of repeated runs
        path = f"data/profiling/network/{hw}_dgx/all_reduce.csv"
        best: dict[tuple[int, int], float] = {}
        for row in csv.DictReader(_git_show(repo, commit, path).splitlines()):
            size, workers = int(row["size"]), int(row["num_workers"])
            if size in AR_BYTES and row["devices_per_node"] == row["num_workers"]:
                t = _median_us(row, "all_reduce")
                key = (workers, size)
                best[key] = min(best.get(key, t), t)  # one entry per rank: the fastest
                # (ranks wait for each other, so the fastest rank's median is the collective)
        for (workers, size), t in sorted(best.items()):
            rows.append([HARDWARE[hw], "", workers, 0, "all_reduce", "collective", 0, 0, 0,
                         size, round(t, 3)])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        f.write(f"# Source: github.com/microsoft/vidur, commit {commit}, data/profiling "
                "(compute/{h100,a100}/*/*/mlp.csv, network/{h100,a100}_dgx/all_reduce.csv).\n")
        f.write("# Median kernel times in microseconds (fp16), extracted by "
                "tools/extract_vidur_kernels.py; numbers only, MIT-licensed source.\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["hardware", "model", "tp", "tokens", "op", "kind", "m", "n", "k",
                    "bytes", "time_us"])
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    repo_dir = Path(sys.argv[1])
    rev = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
        ["git", "-C", str(repo_dir), "rev-parse", "HEAD"], check=True, capture_output=True,
        text=True).stdout.strip()
    main(repo_dir, rev)
