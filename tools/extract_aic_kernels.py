"""Extract measured GEMM and grouped-MoE layer timings from AIConfigurator's perf database.

Usage: python tools/extract_aic_kernels.py AIC_CORE_WHEEL_OR_DIR

GEMMs: the ``gemm_perf.parquet`` tables of the same database (same GPUs, backends and
newest version per backend) for m in GEMM_TOKENS and n, k in GEMM_DIMS (prefill-sized,
compute-bound GEMMs), bf16, fp8 (per-tensor and block-scaled) and nvfp4, the fastest
kernel per shape, into ``pdsim/data/kernels/aic_gemm_kernels.csv``
(``tools/fit_gemm_precision.py`` fits each GPU's per-precision efficiencies to them).

MoE:
Reads the ``moe_perf.parquet`` tables of aiconfigurator-core 0.12.0 (PyPI wheel
``aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl``, Apache License 2.0;
``aiconfigurator_core/systems/data/{h100_sxm,h200_sxm,b200_sxm}/moe/{trtllm,sglang,vllm}/
VERSION/moe_perf.parquet``: one MoE layer's kernels, routing to combine, timed on the GPU
by AIConfigurator's collectors) and writes ``pdsim/data/kernels/aic_moe_kernels.csv``:
DeepSeek-V3's expert shape (hidden 7168, expert intermediate 2048, top-8 of 256 experts),
tokens balanced over the experts, experts sliced by tensor parallelism or sharded by
expert parallelism over 4 or 8 GPUs, the dtypes pdsim prices (fp8 block-scaled, fp8,
nvfp4, bf16). Per (GPU, backend, dtype, layout, tokens) the row keeps the fastest of the
backend's kernels (an engine picks or autotunes its kernel; the database times several),
from the newest version whose table has the shape. Only numbers are carried over.

Decode-sized fp8 MoE layers: the same tables' block-scaled fp8 layers of the fp8 MoE
checkpoints pdsim ships (DECODE_SHAPES: DeepSeek-V3, Kimi-K2.5, Qwen3-235B-A22B,
MiniMax-M2.5), DECODE_TOKENS tokens balanced over the experts, experts sliced by tensor
parallelism (moe_tp 1-8, no expert parallelism), the fastest kernel per point, every
version of every backend's table (the engines' fp8 MoE kernels changed between versions),
into ``pdsim/data/kernels/aic_moe_decode_kernels.csv``
(``tools/fit_moe_kernels.py --fp8-decode`` fits each GPU's and engine's
``fp8_moe_efficiency`` to them).

Needs pandas and pyarrow (not pdsim dependencies): run it in a scratch environment.
"""

from __future__ import annotations

import csv
import io
import re
import sys
import zipfile
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

KERNELS = Path(__file__).resolve().parent.parent / "pdsim" / "data" / "kernels"
OUT = KERNELS / "aic_moe_kernels.csv"
GEMM_OUT = KERNELS / "aic_gemm_kernels.csv"
GEMM_TOKENS = (1024, 2048, 4096, 8192, 16384)
GEMM_DIMS = (1024, 2048, 4096, 7168, 8192, 16384)
GEMM_PATH = re.compile(r"systems/data/(\w+)/gemm/(\w+)/([\w.]+)/gemm_perf\.parquet$")
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}
DTYPES = {"fp8_block": "fp8", "fp8": "fp8", "nvfp4": "nvfp4", "bfloat16": "bf16"}
GEMM_DTYPES = {"fp8_block": "fp8", "fp8": "fp8", "nvfp4": "fp4", "bfloat16": "bf16"}
SHAPE = {"hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 256}
LAYOUTS = {(4, 1), (8, 1), (1, 4), (1, 8)}  # (moe_tp_size, moe_ep_size)
DECODE_OUT = KERNELS / "aic_moe_decode_kernels.csv"
DECODE_SHAPES = {  # (hidden, expert intermediate, top-k, experts) -> pdsim model profile
    (7168, 2048, 8, 256): "deepseek-v3", (7168, 2048, 8, 384): "kimi-k2.5",
    (4096, 1536, 8, 128): "qwen3-235b-a22b", (3072, 1536, 8, 256): "minimax-m2.5"}
DECODE_TOKENS = (64, 128, 256, 512)
DECODE_TP = (1, 2, 4, 8)
PATH = re.compile(r"systems/data/(\w+)/moe/(\w+)/([\w.]+)/moe_perf\.parquet$")


def _version_key(v: str) -> tuple[int | str, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]|(?<=\d)(?=rc)", v))


def _tables(src: Path, leaf: str, pattern: re.Pattern[str]
            ) -> list[tuple[str, str, str, bytes]]:
    """(system, backend, version, parquet bytes) of every ``leaf`` table matching
    ``pattern``, newest version first."""
    found: list[tuple[str, str, str, bytes]] = []
    if src.is_dir():
        items = [(str(p), p.read_bytes) for p in src.rglob(leaf)]
    else:
        zf = zipfile.ZipFile(src)
        items = [(n, (lambda n=n: zf.read(n))) for n in zf.namelist() if n.endswith(leaf)]
    for name, read in items:
        m = pattern.search(name)
        if m and m.group(1) in SYSTEMS:
            found.append((m.group(1), m.group(2), m.group(3), read()))
    return sorted(found, key=lambda t: (t[0], t[1], _version_key(t[2])), reverse=True)


def _decode_rows(src: Path) -> list[tuple[object, ...]]:
    """The decode-sized block-scaled fp8 MoE rows (see the module docstring)."""
    rows: list[tuple[object, ...]] = []
    for system, backend, version, data in _tables(src, "moe_perf.parquet", PATH):
        df = pd.read_parquet(io.BytesIO(data))
        if not {"distribution", "moe_dtype", "hidden_size"}.issubset(df.columns):
            continue
        q = df[(df.distribution == "balanced") & (df.moe_dtype == "fp8_block")
               & (df.moe_ep_size == 1) & df.moe_tp_size.isin(DECODE_TP)
               & df.num_tokens.isin(DECODE_TOKENS)]
        for shape, model in DECODE_SHAPES.items():
            s = q[(q.hidden_size == shape[0]) & (q.inter_size == shape[1])
                  & (q.topk == shape[2]) & (q.num_experts == shape[3])]
            if s.empty:
                continue
            best = s.groupby(["moe_tp_size", "num_tokens"], as_index=False)["latency"].min()
            rows.extend((SYSTEMS[system], backend, version, model, int(r.moe_tp_size),
                         int(r.num_tokens), round(float(r.latency) * 1e3, 3))
                        for r in best.itertuples())
    return sorted(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    done: set[tuple[str, str]] = set()
    for system, backend, version, data in _tables(Path(argv[0]), "moe_perf.parquet", PATH):
        if (system, backend) in done:  # a newer version of this table had the shape
            continue
        df = pd.read_parquet(io.BytesIO(data))
        if not {"distribution", "moe_dtype", *SHAPE}.issubset(df.columns):
            continue
        q = df[(df.distribution == "balanced") & df.moe_dtype.isin(list(DTYPES))]
        for col, val in SHAPE.items():
            q = q[q[col] == val]
        pairs = zip(q.moe_tp_size, q.moe_ep_size, strict=True)
        layout = pd.Series([(int(t), int(e)) in LAYOUTS for t, e in pairs], index=q.index,
                           dtype=bool)
        q = q[layout]
        if q.empty:
            continue
        best = q.groupby(["moe_dtype", "moe_tp_size", "moe_ep_size", "num_tokens"],
                         as_index=False)["latency"].min()
        done.add((system, backend))
        for r in best.itertuples():
            rows.append((SYSTEMS[system], backend, version, r.moe_dtype,
                         DTYPES[r.moe_dtype], int(r.moe_tp_size), int(r.moe_ep_size),
                         int(r.num_tokens), round(float(r.latency) * 1e3, 3)))
    with OUT.open("w", newline="") as f:
        f.write("# Source: aiconfigurator-core 0.12.0 (PyPI, Apache License 2.0), "
                "aiconfigurator_core/systems/data/*/moe/*/*/moe_perf.parquet; extracted by "
                "tools/extract_aic_kernels.py.\n")
        f.write("# One DeepSeek-V3 MoE layer (hidden 7168, expert intermediate 2048, top-8 of "
                "256), balanced routing; time_us: the fastest kernel of the newest "
                "table with the shape; numbers only.\n")
        w = csv.writer(f)
        w.writerow(["hardware", "backend", "version", "moe_dtype", "expert_dtype", "moe_tp",
                    "moe_ep", "tokens", "time_us"])
        w.writerows(rows)
    print(f"{len(rows)} rows -> {OUT}")
    decode_rows = _decode_rows(Path(argv[0]))
    with DECODE_OUT.open("w", newline="") as f:
        f.write("# Source: aiconfigurator-core 0.12.0 (PyPI, Apache License 2.0), "
                "aiconfigurator_core/systems/data/*/moe/*/*/moe_perf.parquet; extracted by "
                "tools/extract_aic_kernels.py.\n")
        f.write("# One block-scaled fp8 MoE layer of a shipped model profile at decode sizes, "
                "balanced routing, experts sliced over moe_tp GPUs; time_us: the fastest "
                "kernel of the version's table; numbers only.\n")
        w = csv.writer(f)
        w.writerow(["hardware", "backend", "version", "model", "moe_tp", "tokens", "time_us"])
        w.writerows(decode_rows)
    print(f"{len(decode_rows)} rows -> {DECODE_OUT}")
    gemm_rows = []
    done.clear()
    for system, backend, version, data in _tables(Path(argv[0]), "gemm_perf.parquet", GEMM_PATH):
        if (system, backend) in done:
            continue
        df = pd.read_parquet(io.BytesIO(data))
        q = df[df.gemm_dtype.isin(list(GEMM_DTYPES)) & df.m.isin(GEMM_TOKENS)
               & df.n.isin(GEMM_DIMS) & df.k.isin(GEMM_DIMS)]
        if q.empty:
            continue
        done.add((system, backend))
        best = q.groupby(["gemm_dtype", "m", "n", "k"], as_index=False)["latency"].min()
        for r in best.itertuples():
            gemm_rows.append((SYSTEMS[system], backend, version, r.gemm_dtype,
                              GEMM_DTYPES[r.gemm_dtype], int(r.m), int(r.n), int(r.k),
                              round(float(r.latency) * 1e3, 3)))
    with GEMM_OUT.open("w", newline="") as f:
        f.write("# Source: aiconfigurator-core 0.12.0 (PyPI, Apache License 2.0), "
                "aiconfigurator_core/systems/data/*/gemm/*/*/gemm_perf.parquet; extracted by "
                "tools/extract_aic_kernels.py.\n")
        f.write("# One m x k by k x n GEMM; time_us: the fastest kernel of the newest table "
                "with the shape; numbers only.\n")
        w = csv.writer(f)
        w.writerow(["hardware", "backend", "version", "gemm_dtype", "precision", "m", "n",
                    "k", "time_us"])
        w.writerows(gemm_rows)
    print(f"{len(gemm_rows)} rows -> {GEMM_OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
