"""The parts of ``pdsim serve`` that need no server: the stated rules (prompt length,
output length, token text, errors), the live intake against pre-generated arrivals, and
the command's refusals."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.engine_config import EngineConfig
from pdsim.loader import load_config
from pdsim.serve.live import Event, LiveCluster
from pdsim.serve.protocol import APIError, parse_request, text_tokens, token_text
from pdsim.serve.replay import log_jsonl, replay_config
from pdsim.simulation import Simulation
from pdsim.workload import RequestSpecs

ROOT = Path(__file__).resolve().parents[2]
MTP3 = ROOT / "configs" / "mtp3.yaml"


def test_prompt_length_rule() -> None:
    assert text_tokens("") == 1
    assert text_tokens("abcd") == 1
    assert text_tokens("abcde") == 2
    assert text_tokens("é" * 4) == 2  # 8 utf-8 bytes
    p = parse_request({"prompt": [5, 6, 7]}, chat=False)
    assert p.prompt_tokens == 3 and p.max_tokens == 16  # OpenAI's default
    p = parse_request({"prompt": "x", "prompt_token_ids": [1] * 9}, chat=False)
    assert p.prompt_tokens == 9
    chat = parse_request({"messages": [{"role": "user", "content": "hello"}]}, chat=True)
    assert chat.prompt_tokens == math.ceil(len("user: hello\n") / 4)
    assert chat.max_tokens is None  # the room left in the context


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "3"}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 3, "min_tokens": 4}, "min_tokens"),
    ({"prompt": "hi", "n": 2}, "n"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": None}, "prompt"),
    ({"prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "hi", "kv_transfer_params": [1]}, "kv_transfer_params"),
])
def test_bad_fields_are_vllm_400s(body: dict, param: str) -> None:
    with pytest.raises(APIError) as exc:
        parse_request(body, chat=False)
    err = exc.value.body()["error"]
    assert exc.value.status == 400 and err["code"] == 400
    assert err["type"] == "BadRequestError" and err["param"] == param


def test_token_text_rule() -> None:
    assert token_text(0, 0, 3) == " the of and"
    # a chunk's text continues where the last one stopped
    assert token_text(7, 0, 2) + token_text(7, 2, 3) == token_text(7, 0, 5)
    assert len(token_text(3, 10, 40).split()) == 40


def _empty() -> RequestSpecs:
    return RequestSpecs(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def test_add_request_refuses_the_past_and_pregenerated_workloads() -> None:
    cfg = load_config(MTP3)
    with pytest.raises(ValueError, match="no requests"):
        Simulation(cfg).add_request(10, 10, 0.0)
    sim = Simulation(cfg, _empty())
    sim.start()
    sim.add_request(100, 5, 0.5)
    while sim.env.now < 0.5:
        sim.step()
    with pytest.raises(ValueError, match="simulated past"):
        sim.add_request(100, 5, 0.25)


def test_a_live_arrival_is_dispatched_at_the_float_time_a_pregenerated_one_is() -> None:
    """The arrivals process dispatches an arrival at 0.906 (the first) at 0.906; from now
    = 0.0822 no delay lands there (``now + d`` skips it), so the simulation refuses it and
    the server takes the next millisecond that it can dispatch exactly."""
    cfg = load_config(MTP3).model_copy(update={"engine": EngineConfig(decode_runs="off")})
    live = Simulation(cfg, _empty())
    live.start()
    live.env.run(until=0.0822)
    assert not any(live.env.now + d == 0.906 for d in (0.906 - 0.0822, 0.8238, 0.8237999999999999))
    assert not live.can_add_at(0.906)
    with pytest.raises(ValueError, match="exactly"):
        live.add_request(300, 8, 0.906)
    t = next(k / 1000 for k in range(906, 920) if live.can_add_at(k / 1000))
    live.add_request(300, 8, t)
    while live.env.peek() < math.inf:
        live.step()
    got = live.results().records
    want = Simulation(cfg, RequestSpecs(np.array([t]), np.array([300]),
                                        np.array([8]))).run().records
    assert got[0]["p_queued_s"] == t
    assert [str(r) for r in got] == [str(r) for r in want]


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 3000), st.integers(1, 120)),
                min_size=1, max_size=30))
def test_live_intake_gives_the_records_of_the_same_arrivals_pregenerated(rows) -> None:
    """Requests added while the simulation runs (each at the first millisecond, from the
    one asked for, that it can take: as the server adds them) end exactly as the same
    requests pre-generated; and no token is reported before the time of the step that
    emitted it."""
    cfg = load_config(MTP3).model_copy(update={"engine": EngineConfig(decode_runs="off")})
    gaps_ms, prompts, outputs = zip(*rows, strict=True)
    live = LiveCluster(cfg)
    seen: list[Event] = []
    late: list[float] = []

    def note(ev: Event) -> None:
        seen.append(ev)
        late.append(live.now_s - ev.at_s)

    ms, arrivals = 0, []
    for gap, p, o in zip(gaps_ms, prompts, outputs, strict=True):
        ms += gap if arrivals else 0
        live.advance_to(math.nextafter(ms / 1000, -math.inf))
        while not live.sim.can_add_at(ms / 1000):
            ms += 1
        arrivals.append(ms / 1000)
        live.submit(p, o, ms / 1000, note)
    live.advance_to(math.inf)
    got = live.results()
    offline = Simulation(cfg, RequestSpecs(np.array(arrivals), np.array(prompts),
                                           np.array(outputs)))
    want = offline.run()
    assert [str(r) for r in got.records] == [str(r) for r in want.records]
    assert min(late) >= 0.0  # reported once the clock got there, never before
    tokens = sum(ev.tokens for ev in seen if ev.kind == "tokens")
    assert tokens == sum(outputs)


def test_request_log_replays_at_the_same_times(tmp_path: Path) -> None:
    log = [(0.0, 10, 3), (0.007, 20, 4), (1.234, 30, 5)]
    path = tmp_path / "arrivals.jsonl"
    path.write_text(log_jsonl(log))
    cfg = replay_config(load_config(MTP3), str(path))
    res = Simulation(cfg).run()
    assert [r["arrival_s"] for r in res.records] == [0.0, 0.007, 1.234]
    assert [r["prompt_tokens"] for r in res.records] == [10, 20, 30]


def test_bad_config_and_a_taken_port_are_error_lines() -> None:
    bad = subprocess.run([sys.executable, "-m", "pdsim", "serve", "no-such.yaml"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert "Traceback" not in bad.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        taken = subprocess.run([sys.executable, "-m", "pdsim", "serve", str(MTP3), "--port",
                                str(port)], capture_output=True, text=True, timeout=60)
    assert taken.returncode == 2
    assert f"error: --port: cannot listen on 127.0.0.1:{port}" in taken.stderr
    assert "Traceback" not in taken.stderr


def test_the_driver_says_when_it_falls_behind() -> None:
    """A pass that starts late (the event loop was held up) is measured and warned about,
    not silently drifted over."""
    import asyncio
    import time

    from pdsim.serve.clock import LAG_WARN_S, Clock, Driver

    warnings: list[str] = []
    live = LiveCluster(load_config(MTP3))
    clock = Clock(10.0)
    driver = Driver(live, clock, warnings.append)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(driver.run(stop))
        clock.start()
        live.submit(2000, 64, 0.0, lambda ev: None)
        driver.poke()
        await asyncio.sleep(0.05)
        time.sleep(2 * LAG_WARN_S)  # the loop is held up: the next events come late
        await asyncio.sleep(0.05)
        stop.set()
        driver.poke()
        await task

    asyncio.run(run())
    assert driver.max_lag_s >= 1.5 * LAG_WARN_S
    assert warnings and "behind the clock at --speed 10" in warnings[-1]


def _live_run(cfg, rows, keep_requests: bool):
    """``rows`` (gap ms, prompt, output) added to a running simulation as the server adds
    them (each at the first millisecond it can take), interleaved with its events; the
    simulation run out and the arrivals it took."""
    sim = Simulation(cfg, _empty(), keep_requests=keep_requests)
    sim.start()
    ms, arrivals = 0, []
    for gap, p, o in rows:
        ms += gap if arrivals else 0
        while sim.env.peek() < ms / 1000:
            sim.step()
        while not sim.can_add_at(ms / 1000):
            ms += 1
        arrivals.append(ms / 1000)
        sim.add_request(p, o, ms / 1000)
    while sim.env.peek() < math.inf:
        sim.step()
    return sim, arrivals


@pytest.mark.parametrize("decode_runs", ["off", "auto"])
@pytest.mark.parametrize("keep_requests", [True, False])
def test_live_storage_grows_and_records_as_pregenerated(decode_runs: str,
                                                        keep_requests: bool) -> None:
    """150 requests added live (past the first capacities of the specs' arrays, the
    facts' columns and the acceptance table: 64 and 128 rows, with requests in flight
    when they grow) give the records, segments and summary of the same requests
    pre-generated, with decode runs on or off; once recorded none is held."""
    cfg = load_config(MTP3).model_copy(update={"engine": EngineConfig(decode_runs=decode_runs)})
    rng = np.random.default_rng(3)
    n = 150
    rows = list(zip(rng.integers(0, 40, n).tolist(), rng.integers(16, 2500, n).tolist(),
                    rng.integers(1, 60, n).tolist(), strict=True))
    sim, arrivals = _live_run(cfg, rows, keep_requests)
    got = sim.results()
    _, prompts, outputs = zip(*rows, strict=True)
    want = Simulation(cfg, RequestSpecs(np.array(arrivals), np.array(prompts),
                                        np.array(outputs))).run()
    assert sim.done and got.num_requests == n
    assert [str(r) for r in got.records] == [str(r) for r in want.records]
    assert got.segments == want.segments
    assert got.summary == want.summary
    assert not sim.table.live  # every request recorded and let go
    if keep_requests:
        assert [r.id for r in sim.requests] == list(range(n))
        # the kept requests read their rows of the table the records hold
        table = np.asarray(got.records.column("accepted_per_pos"))
        assert all((r.accepted_per_pos == table[r.id]).all() for r in sim.requests)
    else:
        with pytest.raises(AttributeError):
            _ = sim.requests


def test_a_client_d_hop_retargets_the_request_everywhere() -> None:
    """A request prefilled for a client's D hop (P runs it with max_tokens = 1) and
    forwarded with 9 output tokens to generate: its record says 9 were its target."""
    live = LiveCluster(load_config(MTP3))
    lr = live.submit(700, 1, 0.0, lambda ev: None, hop="prefill")
    while live.held_request(lr.req.id) is None:
        live.advance_to(live.next_event_s())
    at = live.arrival_after(live.now_s)
    done = live.forward(lr.req, "D0", 9, at, lambda ev: None)
    live.advance_to(math.inf)
    assert done.finished
    rec = live.results().records[0]
    assert rec["status"] == "finished"
    assert rec["target_output_tokens"] == rec["output_tokens"] == 9
    assert live.sim.route_to == {} and live.sim.client_handover == set()
