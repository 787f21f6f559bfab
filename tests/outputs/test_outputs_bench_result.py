"""``bench_result.json`` as ``vllm bench serve --save-result`` writes it: constant arrivals
as ``burstiness: Infinity`` (vLLM json.dumps its float), ``request_goodput`` from the
config's SLOs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import pdsim
from pdsim.realdata import read_bench_result
from pdsim.writers import write_run

MTP3 = Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml"


def _written(tmp_path: Path, overrides: list[str]) -> tuple[pdsim.Results, str]:
    res = pdsim.simulate(pdsim.load_config(MTP3, overrides=["workload.num_requests=60",
                                                            *overrides]))
    write_run(res, tmp_path)
    return res, (tmp_path / "bench_result.json").read_text()


def test_constant_arrivals_are_written_with_infinite_burstiness(tmp_path: Path) -> None:
    _, text = _written(tmp_path, ["workload.arrivals={kind: constant, rate_per_s: 3}"])
    assert '"burstiness": Infinity' in text
    assert math.isinf(json.loads(text)["burstiness"])
    assert math.isinf(read_bench_result(tmp_path / "bench_result.json").burstiness)


def test_poisson_arrivals_keep_burstiness_one_and_the_file_is_strict_json(
        tmp_path: Path) -> None:
    _, text = _written(tmp_path, [])
    doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert doc["burstiness"] == 1.0
    assert doc["request_goodput"] is None  # no SLOs in the config


def test_request_goodput_counts_requests_meeting_every_slo(tmp_path: Path) -> None:
    probe = pdsim.simulate(pdsim.load_config(MTP3, overrides=["workload.num_requests=60"]))
    ok = [r for r in probe.records if r["status"] == "finished"]
    ttft_slo = float(np.median([r["ttft_s"] for r in ok]))
    tpot_slo = float(np.percentile([r["tpot_s"] for r in ok], 75))
    res, text = _written(tmp_path, [f"slo.ttft_s={ttft_slo}", f"slo.tpot_s={tpot_slo}"])
    doc = json.loads(text)
    good = sum(1 for r in res.records if r["status"] == "finished"
               and r["ttft_s"] <= ttft_slo and r["tpot_s"] <= tpot_slo)
    assert 0 < good < len(ok)
    assert doc["request_goodput"] == good / doc["duration"]
