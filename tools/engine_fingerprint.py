"""Fingerprint the engine's output: hash what every shipped config and the benchmark
workload produce, so a refactor can show it changed no number.

For each case it hashes, separately, every request record (all columns, bit for bit), every
instance's step end times and step log, the busy times and preemptions, the decode segments
and the summary. Two trees whose fingerprints match produced byte-identical facts.

    .venv/bin/python tools/engine_fingerprint.py > /tmp/after.json
    .venv/bin/python tools/engine_fingerprint.py --compare tools/engine_fingerprint_baseline.json

``--compare`` prints each case whose hashes differ and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "reliability"))


def _canon(value: Any) -> Any:
    """A JSON-able form of ``value`` that keeps every float bit (repr round-trips)."""
    if isinstance(value, Mapping):  # a dict, or a table read as one (``SegmentTable``)
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple, Sequence)) and not isinstance(value, str):
        return [_canon(v) for v in value]  # a list, or a sequence read as one (RateSamples)
    if isinstance(value, np.ndarray):
        return [_canon(v) for v in value.tolist()]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return "nan" if math.isnan(f) else repr(f)
    if isinstance(value, np.integer):
        return int(value)
    if hasattr(value, "value") and not isinstance(value, (int, str, bool)):
        return _canon(value.value)  # enums
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_canon(value)).encode()).hexdigest()[:16]


def _array_digest(arr: np.ndarray) -> str:
    a = np.ascontiguousarray(arr)
    return hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode()
                          + a.tobytes()).hexdigest()[:16]


def fingerprint(results: Any) -> dict[str, str]:
    """The hashes of one run's facts."""
    records = results.records
    cols = getattr(records, "columns", None)
    if cols is None:
        rec_hash = _digest(list(records))
    else:
        h = hashlib.sha256()
        for key in sorted(cols):
            col = cols[key]
            h.update(key.encode())
            h.update(_array_digest(col).encode() if isinstance(col, np.ndarray)
                     else _digest(col).encode())
        rec_hash = h.hexdigest()[:16]
    steps = hashlib.sha256()
    busy = []
    for inst in results.instances:
        steps.update(inst.name.encode())
        steps.update(_array_digest(inst.step_end_s).encode())
        steps.update(_array_digest(inst.step_log).encode())
        busy.append((inst.name, float(inst.busy_s), int(inst.preemptions), int(inst.num_blocks)))
    return {
        "records": rec_hash,
        "steps": steps.hexdigest()[:16],
        "busy": _digest(busy),
        "segments": _digest(results.segments),
        "summary": _digest(results.summary.as_dict() if hasattr(results.summary, "as_dict")
                           else results.summary),
        "links": _digest(results.links),
        "num_requests": str(len(records)),
    }


def cases() -> list[tuple[str, Any]]:
    """(name, config) of every shipped config and the benchmark workload."""
    import engine_speed

    import pdsim

    out: list[tuple[str, Any]] = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        out.append((path.name, pdsim.load_config(path)))
    # the workload ``engine_speed.py --instructions`` counts (its smaller run), closed loop
    out.append(("bench_closed_1024", engine_speed.workload_config(1024, 1024)))
    out.append(("bench_poisson_400", engine_speed.workload_config(400, 256, rate=40.0)))
    # the reliability cases: faults, preemption, lease expiry, prefix caching, colocated
    from rel_support import small_cfg
    from test_rel_invariants import CASES, D_PREEMPTION_CASES

    for group, table in (("rel", CASES), ("rel_dpre", D_PREEMPTION_CASES)):
        for name in sorted(table):
            out.append((f"{group}:{name}", small_cfg(table[name])))
    return out


def simulate_step_by_step(cfg: Any) -> Any:
    """``cfg`` simulated with decode runs off (every decode step its own event)."""
    import pdsim

    try:
        from pdsim.engine_config import EngineConfig  # after the engine redesign
    except ImportError:
        import pdsim.engine.instance as instance_module

        original = instance_module.plan_decode_run
        instance_module.plan_decode_run = lambda inst: None  # type: ignore[assignment]
        try:
            return pdsim.simulate(cfg)
        finally:
            instance_module.plan_decode_run = original
    if "engine" in type(cfg).model_fields:
        return pdsim.simulate(cfg.model_copy(update={"engine": EngineConfig(decode_runs="off")}))
    from pdsim.simulation import Simulation

    return Simulation(cfg, engine=EngineConfig(decode_runs="off")).run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", type=Path, help="a saved fingerprint to compare against")
    ap.add_argument("--only", action="append", default=[], help="run only these cases")
    args = ap.parse_args()
    import pdsim

    result: dict[str, dict[str, str]] = {}
    for name, cfg in cases():
        if args.only and name not in args.only:
            continue
        result[name] = fingerprint(pdsim.simulate(cfg))
        print(f"{name}: {result[name]}", file=sys.stderr, flush=True)
        result[name + " [runs off]"] = fingerprint(simulate_step_by_step(cfg))
    if args.compare is None:
        print(json.dumps(result, indent=1, sort_keys=True))
        return
    base = json.loads(args.compare.read_text())
    new = [name for name in result if name not in base]  # a config added since the baseline
    bad = [name for name in result if name in base and base[name] != result[name]]
    missing = [name for name in base if name not in result and not args.only]
    for name in new:
        print(f"NEW {name} (not in the baseline)")
    for name in bad:
        diff = {k: (base.get(name, {}).get(k), v) for k, v in result[name].items()
                if base.get(name, {}).get(k) != v}
        print(f"DIFFERS {name}: {diff}")
    for name in missing:
        print(f"MISSING {name}")
    print(f"{len(result) - len(new) - len(bad)}/{len(result) - len(new)} cases identical"
          + (f"; {len(new)} new" if new else ""))
    sys.exit(1 if bad or missing else 0)


if __name__ == "__main__":
    main()
