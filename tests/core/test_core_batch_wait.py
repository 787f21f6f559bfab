"""TensorRT-LLM's batch waiting (``scheduler.batch_wait_steps`` and
``batch_wait_max_tokens_ratio``, PyExecutor ``_waiting_requests``): while an engine runs
decode rows, new prompts wait until the held steps reach the limit or the step's tokens
reach the ratio of ``max_num_batched_tokens``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pdsim import Simulation, load_config
from pdsim.engine.scheduler import Scheduler
from pdsim.invariants.checker import run_checked

STEP_S = 0.015  # every step of the config below: overhead 3 ms + the 12 ms floor


def _cfg(steps: int, ratio: float, *, requests: int = 2, rate: float = 10.0,
         output: int = 200, mode: str = "colocated", dp: int = 1) -> dict[str, Any]:
    sched = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "block_size": 16,
             "batch_wait_steps": steps, "batch_wait_max_tokens_ratio": ratio}
    group = {"count": dp, "kv_cache_gib": 8, "scheduler": sched}
    if dp > 1:
        group["attention_dp_size"] = dp
    cluster: dict[str, Any] = {"mode": mode}
    if mode == "colocated":
        cluster["colocated"] = group
    else:
        cluster["prefill"] = {"count": 1, "kv_cache_gib": 8, "scheduler": dict(sched)}
        cluster["decode"] = group
    return {
        "name": "batch-wait", "seed": 1,
        "model": {"layer_groups": [{"kind": "attention", "num_layers": 8,
                                    "kv_bytes_per_token_per_layer": 1024}]},
        "step_time": {"kind": "simple", "per_token_s": 0.0, "per_context_token_s": 0.0,
                      "per_attention_pair_s": 0.0},
        "cluster": cluster,
        "workload": {"num_requests": requests,
                     "arrivals": {"kind": "constant", "rate_per_s": rate},
                     "prompt_tokens": {"kind": "fixed", "tokens": 512},
                     "output_tokens": {"kind": "fixed", "tokens": output}},
    }


def _ttft(cfg: dict[str, Any]) -> np.ndarray:
    res = Simulation(load_config(cfg)).run()
    return np.asarray(res.records.columns["ttft_s"], dtype=float)


@pytest.mark.parametrize("steps", [1, 7, 20])
def test_a_prompt_beside_decode_rows_waits_exactly_the_held_steps(steps: int) -> None:
    """The second request arrives while the first decodes: with a token threshold the step
    never reaches (513 tokens against 4,096), it starts ``steps`` steps later than
    without the wait; the first, which found the engine idle, does not wait."""
    base = _ttft(_cfg(0, 0.0))
    held = _ttft(_cfg(steps, 1.0))
    assert held[0] == base[0]
    assert held[1] - base[1] == pytest.approx(steps * STEP_S, abs=1e-9)


def test_the_token_threshold_ends_the_wait_at_once() -> None:
    """512 prompt tokens and one decode row reach 0.1 x 4,096 = 409.6 tokens: no wait (the
    same times up to rounding: a waiting instance steps one step at a time)."""
    np.testing.assert_allclose(_ttft(_cfg(20, 0.1)), _ttft(_cfg(0, 0.0)), rtol=0, atol=1e-9)


@pytest.mark.parametrize(("steps", "ratio"), [(20, 0.0), (0, 0.9)])
def test_both_settings_are_needed_for_a_wait(steps: int, ratio: float) -> None:
    """As in TensorRT-LLM: a ratio of 0 is always reached and a timeout of 0 always
    passed, so either alone holds nothing back."""
    np.testing.assert_allclose(_ttft(_cfg(steps, ratio)), _ttft(_cfg(0, 0.0)), rtol=0, atol=1e-9)


@pytest.mark.parametrize(("mode", "dp"), [("disaggregated", 1), ("colocated", 2)])
def test_no_wait_on_decode_instances_or_attention_dp(mode: str, dp: int) -> None:
    """TensorRT-LLM skips the wait with attention DP, and a decode instance's new
    requests are hand-overs, not prompts."""
    cfg = _cfg(20, 1.0, mode=mode, dp=dp, requests=6)
    np.testing.assert_allclose(_ttft(cfg), _ttft(_cfg(0, 0.0, mode=mode, dp=dp, requests=6)),
                               rtol=0, atol=1e-9)


def test_admissions_follow_the_wait_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plan, checked against TensorRT-LLM's counter rebuilt from the plans: a step
    with decode rows and a waiting prompt holds it back until the count reaches N (then
    admits and restarts the count); a step without decode rows admits at once."""
    n = 5
    seen: list[tuple[bool, bool, bool]] = []  # (waiting prompt, decode rows, admitted)
    original = Scheduler.schedule

    def schedule(self: Scheduler, now_s: float, step: int) -> Any:
        waiting = bool(self.waiting)
        rows = bool(self.rows.count)
        before = len(self.waiting)
        plan = original(self, now_s, step)
        seen.append((waiting, rows, len(self.waiting) < before))
        return plan

    monkeypatch.setattr(Scheduler, "schedule", schedule)
    cfg = _cfg(n, 1.0, requests=40, rate=30.0, output=60)
    res = Simulation(load_config(cfg)).run()
    assert res.summary["completed"] == 40
    count = 0
    holds = 0
    for waiting, rows, admitted in seen:
        if not waiting:
            assert not admitted
            continue
        if not rows:
            assert admitted  # nothing to wait beside
            continue
        expected = count >= n
        assert admitted == expected
        if admitted:
            count = 0
        else:
            count += 1
            holds += 1
    assert holds >= n  # it did hold prompts back


def test_every_request_ends_under_the_invariants() -> None:
    checked = run_checked(load_config(_cfg(20, 0.9, requests=50, rate=40.0, output=80)))
    assert checked.summary["completed"] == 50


def test_a_prompt_short_of_kv_blocks_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT-LLM counts the context requests its schedulers took: a step whose head
    prompt cannot get its KV blocks holds nothing back, so the wait count stands still
    (KV for about two and a half requests here, so prompts often wait for blocks)."""
    seen: list[tuple[bool, int, int]] = []  # (head fits, count before, count after)
    original = Scheduler.schedule

    def schedule(self: Scheduler, now_s: float, step: int) -> Any:
        if self.waiting and self.rows.count:
            head = self.waiting[0]
            n = self.chunk_tokens(head, self.max_num_batched_tokens)
            fits = self.kv.extra_blocks(head.id, self.prefill_target_tokens(head, n)) \
                <= self.pool.num_free
            before = self._batch_waited
            plan = original(self, now_s, step)
            seen.append((fits, before, self._batch_waited))
            return plan
        return original(self, now_s, step)

    monkeypatch.setattr(Scheduler, "schedule", schedule)
    cfg = _cfg(20, 1.0, requests=12, rate=30.0, output=60)
    cfg["cluster"]["colocated"]["kv_cache_gib"] = 0.0125
    res = Simulation(load_config(cfg)).run()
    assert res.summary["completed"] == 12
    blocked = [(b, a) for fits, b, a in seen if not fits]
    assert blocked, "no step found its head prompt short of blocks"
    assert all(after == before for before, after in blocked)
    assert any(after == before + 1 for fits, before, after in seen if fits)


def test_which_pools_wait() -> None:
    """The rule in one place (InstanceGroupConfig.batch_waits): a colocated pool without
    attention DP with both settings; never a prefill or decode pool, nor attention DP."""
    from pdsim.config import Role
    colocated = load_config(_cfg(20, 0.9)).cluster.colocated
    assert colocated.batch_waits(Role.COLOCATED)
    assert not colocated.batch_waits(Role.DECODE)
    assert not load_config(_cfg(20, 0.0)).cluster.colocated.batch_waits(Role.COLOCATED)
    assert not load_config(_cfg(0, 0.9)).cluster.colocated.batch_waits(Role.COLOCATED)
    dp = load_config(_cfg(20, 0.9, dp=2)).cluster.colocated
    assert not dp.batch_waits(Role.COLOCATED)
