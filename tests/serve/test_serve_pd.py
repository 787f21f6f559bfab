"""``pdsim serve --pd-endpoints``: each instance on its own port with vLLM's disaggregated
semantics, driven by a client doing the two-hop flow (prefill with ``do_remote_decode``,
then decode with the params the prefill instance returned), beside requests through the
built-in proxy on the main port."""

from __future__ import annotations

import asyncio
import math

import httpx
import numpy as np
import openai
import pytest
from serve_client import MODEL, client, read_records, request_id, scrape, total

SPEED = "20"


async def two_hop(p_url: str, d_url: str, prompt: int, out: int) -> dict:
    """vLLM's P/D proxy flow, with the official client: P gets the request with
    ``max_tokens = 1`` and ``do_remote_decode``; D gets the original request with the
    ``kv_transfer_params`` P answered, and streams."""
    async with client(p_url) as p, client(d_url) as d:
        first = await p.completions.create(
            model=MODEL, prompt=list(range(prompt)), max_tokens=1,
            extra_body={"kv_transfer_params": {"do_remote_decode": True,
                                               "do_remote_prefill": False}})
        params = first.model_extra["kv_transfer_params"]
        stream = await d.completions.create(
            model=MODEL, prompt=list(range(prompt)), max_tokens=out, stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "kv_transfer_params": params})
        texts, usage, rid = [], None, None
        async for chunk in stream:
            rid = request_id(chunk.id)
            if chunk.choices:
                texts.append(chunk.choices[0].text)
            if chunk.usage is not None:
                usage = chunk.usage
    return {"p": first, "params": params, "texts": texts, "usage": usage, "id": rid,
            "prompt": prompt, "out": out}


async def proxied(url: str, prompt: int, out: int) -> dict:
    async with client(url) as c:
        r = await c.completions.create(model=MODEL, prompt=list(range(prompt)),
                                       max_tokens=out, extra_body={"ignore_eos": True})
    return {"id": request_id(r.id), "usage": r.usage, "prompt": prompt, "out": out}


def test_two_hop_flow_and_built_in_proxy(serve) -> None:
    srv = serve("mtp3.yaml", "--speed", SPEED, "--pd-endpoints")
    roles = {name: role for name, (role, _) in srv.instances.items()}
    assert roles == {"P0": "prefill", "D0": "decode"}
    p_url, d_url = srv.instances["P0"][1], srv.instances["D0"][1]
    rng = np.random.default_rng(5)
    sizes = list(zip(rng.integers(64, 3000, 24).tolist(), rng.integers(4, 40, 24).tolist(),
                     strict=True))

    async def run() -> tuple[list, list]:
        sem = asyncio.Semaphore(6)

        async def hop(i: int, prompt: int, out: int) -> dict:
            async with sem:
                if i % 2:
                    return await proxied(srv.url, prompt, out)
                return await two_hop(p_url, d_url, prompt, out)

        done = await asyncio.gather(*(hop(i, p, o) for i, (p, o) in enumerate(sizes)))
        return [r for r in done if "params" in r], [r for r in done if "params" not in r]

    hops, via_proxy = asyncio.run(asyncio.wait_for(run(), 120))

    # what each port refuses, as vLLM's would: a plain request to P, unknown params at D
    plain = httpx.post(f"{p_url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert plain.status_code == 400 and plain.json()["error"]["type"] == "BadRequestError"
    unknown = httpx.post(f"{d_url}/v1/completions", json={
        "prompt": "hi", "max_tokens": 2,
        "kv_transfer_params": {"do_remote_prefill": True, "remote_request_id": "999999"}})
    assert unknown.status_code == 400 and "remote_request_id" in unknown.json()["error"][
        "message"]
    with pytest.raises(openai.BadRequestError):
        asyncio.run(two_hop(p_url, d_url, 140_000, 4))
    metrics = {"P0": scrape(p_url), "D0": scrape(d_url), "main": scrape(srv.url)}
    assert srv.stop() == 0
    records = read_records(srv.out)

    for h in hops:
        # P answers with its one token and the params D needs (vLLM NIXL's keys)
        assert h["p"].usage.completion_tokens == 1
        assert h["p"].usage.prompt_tokens == h["prompt"]
        params = h["params"]
        assert params["do_remote_prefill"] is True and params["remote_engine_id"] == "P0"
        assert int(params["remote_request_id"]) == h["id"]
        # 2048-token... a prompt of L tokens holds ceil(L' / 64) blocks of P's (block 64),
        # L' the prompt P ran (the backoff truncates it)
        rec = records[h["id"]]
        assert len(params["remote_block_ids"]) == math.ceil(int(rec["p_prompt_tokens"]) / 64)
        assert h["usage"].completion_tokens == h["out"] == int(rec["output_tokens"])
        assert sum(len(t.split()) for t in h["texts"]) == h["out"]
        assert len(h["texts"]) == int(rec["num_chunks"])
        assert rec["status"] == "finished"
        assert (rec["prefill_instance"], rec["decode_instance"]) == ("P0", "D0")
        assert int(rec["kv_bytes_transferred"]) > 0
        # D took it when the client sent it, after P had finished
        assert float(rec["d_queued_s"]) >= float(rec["p_end_s"])
    for r in via_proxy:
        rec = records[r["id"]]
        assert rec["status"] == "finished"
        assert r["usage"].completion_tokens == r["out"] == int(rec["output_tokens"])
        assert float(rec["d_queued_s"]) == float(rec["p_end_s"])  # the proxy's hand-over
    assert len(records) == len(sizes)

    # each port shows its own instance's series; the main port all of them
    fin = list(records.values())
    assert total(metrics["D0"], "vllm:request_success_total", engine="P0") == 0
    assert total(metrics["D0"], "vllm:request_success_total", engine="D0") == len(fin)
    assert total(metrics["P0"], "vllm:request_success_total", engine="P0") == len(fin)
    assert total(metrics["main"], "vllm:generation_tokens_total", engine="D0") == sum(
        int(r["output_tokens"]) for r in fin)
    assert total(metrics["D0"], "vllm:nixl_xfer_time_seconds_count", engine="D0") == len(fin)
