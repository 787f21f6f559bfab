"""SGLang's receive interval (``scheduler.recv_interval_steps``, ``SchedulerRecvSkipper``):
new requests are taken into the queue only every N pure-decode steps, or at once after a
step with prompt work or an idle turn."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pdsim import Simulation, load_config
from pdsim.engine.scheduler import Scheduler
from pdsim.invariants.checker import run_checked


def _cfg(interval: int, requests: int = 60, rate: float = 4.0) -> dict[str, Any]:
    return {
        "name": "recv", "seed": 1,
        "model": {"layer_groups": [{"kind": "attention", "num_layers": 8,
                                    "kv_bytes_per_token_per_layer": 1024}]},
        "cluster": {"mode": "colocated", "colocated": {
            "count": 1, "kv_cache_gib": 8,
            "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 4096,
                          "block_size": 16, "recv_interval_steps": interval}}},
        "workload": {"num_requests": requests,
                     "arrivals": {"kind": "poisson", "rate_per_s": rate},
                     "prompt_tokens": {"kind": "fixed", "tokens": 512},
                     "output_tokens": {"kind": "fixed", "tokens": 128}},
    }


def _mean_ttft(res: Any) -> float:
    return float(np.mean(np.asarray(res.records.columns["ttft_s"])))


def test_admissions_follow_the_receive_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plan's admission, checked against SGLang's counter rebuilt from the plans
    themselves: a take happens exactly when the steps since the last one weigh N (a
    pure-decode step 1, any other step N) or when there is nothing else to run."""
    n = 7
    seen: list[tuple[bool, bool, bool]] = []  # (admitted, ran prompt work, decode rows)
    original_admit, original_schedule = Scheduler.admit, Scheduler.schedule
    state = {"admitted": False}

    def admit(self: Scheduler, *args: Any, **kwargs: Any) -> bool:
        state["admitted"] = True
        return original_admit(self, *args, **kwargs)

    def schedule(self: Scheduler, now_s: float, step: int) -> Any:
        state["admitted"] = False
        plan = original_schedule(self, now_s, step)
        seen.append((state["admitted"], bool(plan.chunks), bool(plan.num_decode)))
        return plan

    monkeypatch.setattr(Scheduler, "admit", admit)
    monkeypatch.setattr(Scheduler, "schedule", schedule)
    res = Simulation(load_config(_cfg(n))).run()
    assert res.summary["completed"] == 60
    weight = n
    for admitted, prompts, rows in seen:
        # a plan with nothing else to run takes at once (the idle turn)
        expected = weight >= n or not rows
        if admitted:
            weight = 0
        assert admitted == expected
        weight += 1 if rows and not prompts else n
    assert sum(a for a, _, _ in seen) < len(seen) / 2  # it did hold prompts back


def test_an_idle_instance_takes_a_request_at_once() -> None:
    one = [Simulation(load_config(_cfg(k, requests=1))).run() for k in (1, 50)]
    assert _mean_ttft(one[0]) == _mean_ttft(one[1])


def test_the_interval_delays_prompts_under_load_and_every_request_ends() -> None:
    checked = run_checked(load_config(_cfg(30, requests=40)))
    assert checked.summary["completed"] == 40
    base = Simulation(load_config(_cfg(1))).run()
    held = Simulation(load_config(_cfg(30))).run()
    assert _mean_ttft(held) > _mean_ttft(base)
