"""AIConfigurator's own estimate of silicon-sample rows: the worker of
``validation.aic_side_by_side``, run by the interpreter that has ``aiconfigurator``
installed (a separate virtual environment; it is never a pdsim dependency).

Reads one silicon-sample row per line on stdin (a JSON object of the CSV's fields) and
writes one JSON object per line on stdout: the row's ``id``, AIConfigurator's mean TTFT and
TPOT in ms (``aic_ttft_ms``, ``aic_tpot_ms``, empty where it cannot estimate), the reason
where it cannot (``aic_error``), the backend database version it used and the model path it
was given. Imports only the standard library and ``aiconfigurator``, so it runs without
pdsim.

The call is the one AIConfigurator's own scoring of the sample makes
(``tools/accuracy_regression_testing/predict_silicon_sample.py`` at the sample's commit
095f58a): ``aiconfigurator.cli.api.cli_estimate`` with the row's model, system, mode,
backend and version, ISL/OSL, GEMM and MoE quant modes and the row's non-empty batch and
parallel fields (``batch_size`` and the TP/PP/attention-DP/MoE-TP/MoE-EP sizes for agg;
per role, those and ``num_workers`` for disagg), its stdout sent to stderr; a disagg row
without both roles' batch sizes and worker counts is refused as that script refuses it; a
backend version whose perf database is not installed is retried with AIConfigurator's
default database (``backend_version=None``; recorded as ``default``: aiconfigurator
0.12.0's wheel ships one database version per system and backend, and reports a missing
one either as the sample's commit did or as an empty table under the version's folder,
``MISSING_TABLE``, both retried); identical arguments are estimated once.

Two departures, both forced by this machine and both recorded per row:

- ``MODEL_ALIASES``: two checkpoints of the sample have no config.json bundled with
  aiconfigurator (it fetches them from HuggingFace, which cannot be reached here); each is
  given as the bundled checkpoint of the same architecture (the one HuggingFace renamed it
  from, or its base model). The column ``aic_model_path`` says which path was estimated.
  Checkpoints whose bundled twin would differ in quantisation are not aliased: they fail
  with AIConfigurator's own download error.
- Run with ``AIC_ALLOW_UNLISTED_VERSIONS=1`` by the caller (``aic_side_by_side``): from
  aiconfigurator 0.12.0 a raw backend version outside the queryable slots is refused
  instead of looked up; the variable is AIConfigurator's own escape for legacy suites and
  restores the raw lookup that the sample's commit made (and so the default-database
  retry above).

One speed-up changes nothing it computes: ``memoize_yaml`` (90 rows estimated with and
without it on 2026-12-02 agree to the last digit written).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from contextlib import redirect_stdout
from typing import Any

PARALLEL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
AGG_FIELDS = ("batch_size", *PARALLEL_FIELDS)
DISAGG_FIELDS = tuple(f"{role}_{name}" for role in ("prefill", "decode")
                      for name in (*PARALLEL_FIELDS, "batch_size", "num_workers"))
DISAGG_REQUIRED = ("prefill_batch_size", "prefill_num_workers", "decode_batch_size",
                   "decode_num_workers")
MISSING_DATABASE = "Failed to load perf database"
"""The error of a backend version without a perf database, as the sample's commit raises it."""
MISSING_TABLE = "no GEMM rows loaded from"
"""The same, as aiconfigurator 0.12.0 raises it for a version folder its wheel does not ship
(the version is in the path it names)."""

MODEL_ALIASES: dict[str, str] = {
    # the same HuggingFace repository: meta-llama renamed Meta-Llama-3.1-70B to
    # Llama-3.1-70B; aiconfigurator bundles its config.json under the old name
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    # the instruct checkpoint of the same base model: identical architecture fields
    # (hidden 4096, 32 layers, 32/8 heads, FFN 14336, vocab 128256, llama3 RoPE); the
    # config differs in its end-of-sequence token ids only
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
}


def estimate_args(row: dict[str, str]) -> dict[str, Any]:
    """``cli_estimate``'s keyword arguments for a row (see the module docstring)."""
    fields = AGG_FIELDS if row["mode"] == "agg" else DISAGG_FIELDS
    args: dict[str, Any] = {
        "model_path": MODEL_ALIASES.get(row["model_path"], row["model_path"]),
        "system_name": row["system"],
        "mode": row["mode"],
        "backend_name": row["backend"],
        "backend_version": row["backend_version"] or None,
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "gemm_quant_mode": row["gemm_quant_mode"] or None,
        "moe_quant_mode": row["moe_quant_mode"] or None,
    }
    args.update({name: int(row[name]) for name in fields if row.get(name)})
    return args


def _portable(text: str) -> str:
    """An error's text without this machine's install path."""
    import aiconfigurator_core

    root = os.path.dirname(os.path.dirname(os.path.abspath(aiconfigurator_core.__file__)))
    return text.replace(root + os.sep, "")


def _missing_database(exc: Exception, version: str | None) -> bool:
    text = str(exc)
    return MISSING_DATABASE in text or (MISSING_TABLE in text and f"/{version}/" in text)


def memoize_yaml() -> None:
    """Parse each YAML file once. aiconfigurator re-reads its perf databases' YAML metadata
    (``collection_meta.yaml``, the version slots) on every estimate, with pure-Python
    PyYAML: about 90% of an estimate's time here. ``yaml.safe_load`` of a file is memoized
    on the file's path, size and modification time and returns a deep copy, so every
    caller gets exactly the values a fresh parse gives; other streams parse as before."""
    import yaml

    parse = yaml.safe_load
    parsed: dict[tuple[str, int, int], Any] = {}

    def safe_load(stream: Any) -> Any:
        name = getattr(stream, "name", None)
        if not isinstance(name, str) or not os.path.isfile(name):
            return parse(stream)
        st = os.stat(name)
        key = (os.path.realpath(name), st.st_size, st.st_mtime_ns)
        if key not in parsed:
            parsed[key] = parse(stream)
        return copy.deepcopy(parsed[key])

    yaml.safe_load = safe_load


class Estimator:
    """Runs ``cli_estimate`` once per distinct argument set; remembers database versions
    found missing (they are retried with the default at once)."""

    def __init__(self) -> None:
        memoize_yaml()
        from aiconfigurator.cli.api import cli_estimate

        self._estimate = cli_estimate
        self._cache: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
        self._missing: set[tuple[str, str, str]] = set()

    def _call(self, args: dict[str, Any]) -> tuple[float, float]:
        with redirect_stdout(sys.stderr):
            res = self._estimate(**args)
        return float(res.ttft), float(res.tpot)

    def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        if args["mode"] == "disagg":
            for name in DISAGG_REQUIRED:
                if args.get(name) is None:
                    raise ValueError(f"{name} is required for disagg mode.")
        version = args["backend_version"]
        key = (args["system_name"], args["backend_name"], str(version))
        if version is not None and key in self._missing:
            args = {**args, "backend_version": None}
        try:
            ttft, tpot = self._call(args)
        except Exception as exc:
            if args["backend_version"] is None or not _missing_database(exc, version):
                raise
            self._missing.add(key)
            args = {**args, "backend_version": None}
            ttft, tpot = self._call(args)
        return {"aic_ttft_ms": ttft, "aic_tpot_ms": tpot,
                "aic_backend_version": args["backend_version"] or "default"}

    def estimate(self, row: dict[str, str]) -> dict[str, Any]:
        args = estimate_args(row)
        key = tuple(sorted(args.items()))
        if key not in self._cache:
            try:
                self._cache[key] = {**self._run(dict(args)), "aic_error": ""}
            except Exception as exc:  # every failure is a recorded reason
                text = _portable(" ".join(str(exc).split()) or type(exc).__name__)
                self._cache[key] = {"aic_ttft_ms": None, "aic_tpot_ms": None,
                                    "aic_backend_version": "",
                                    "aic_error": f"{type(exc).__name__}: {text}"[:300]}
        return {"id": row["id"], "aic_model_path": args["model_path"], **self._cache[key]}


def main() -> int:
    try:
        est = Estimator()
    except ImportError as exc:
        print(f"error: aiconfigurator: cannot import it in {sys.executable} ({exc})",
              file=sys.stderr)
        return 2
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(est.estimate(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
