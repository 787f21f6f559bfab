"""Client-side helpers of the serve tests: drive a server with the official ``openai``
client and keep, per request, what the client saw and when."""

from __future__ import annotations

import asyncio
import csv
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

MODEL = "mla-moe-mtp3"


@dataclass
class Seen:
    """One request as the client saw it (wall seconds, monotonic)."""

    request_id: int
    prompt_tokens: int
    max_tokens: int
    sent_s: float
    chunk_s: list[float] = field(default_factory=list)
    chunk_text: list[str] = field(default_factory=list)
    usage: Any = None
    finish_reason: str | None = None
    kv_transfer_params: dict[str, Any] | None = None


def request_id(response_id: str) -> int:
    return int(response_id.rsplit("-", 1)[1])


async def stream_completion(client: openai.AsyncOpenAI, prompt_tokens: int,
                            max_tokens: int, chat: bool = False,
                            extra_headers: dict[str, str] | None = None, **extra: Any) -> Seen:
    """One streamed request, every chunk's arrival time kept."""
    sent = time.monotonic()
    body = {"ignore_eos": True, **extra}
    seen: Seen | None = None
    if chat:
        stream: Any = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * (4 * prompt_tokens)}],
            max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
            extra_body=body, extra_headers=extra_headers)
    else:
        stream = await client.completions.create(
            model=MODEL, prompt=list(range(prompt_tokens)), max_tokens=max_tokens,
            stream=True, stream_options={"include_usage": True}, extra_body=body,
            extra_headers=extra_headers)
    async for chunk in stream:
        now = time.monotonic()
        if seen is None:
            seen = Seen(request_id(chunk.id), prompt_tokens, max_tokens, sent)
        if chunk.choices:
            c = chunk.choices[0]
            text = c.delta.content if chat else c.text
            seen.chunk_s.append(now)
            seen.chunk_text.append(text or "")
            if c.finish_reason is not None:
                seen.finish_reason = c.finish_reason
        if chunk.usage is not None:
            seen.usage = chunk.usage
    assert seen is not None
    return seen


async def whole_completion(client: openai.AsyncOpenAI, prompt_tokens: int, max_tokens: int,
                           extra_headers: dict[str, str] | None = None, **extra: Any) -> Seen:
    sent = time.monotonic()
    r = await client.completions.create(model=MODEL, prompt=list(range(prompt_tokens)),
                                        max_tokens=max_tokens,
                                        extra_body={"ignore_eos": True, **extra},
                                        extra_headers=extra_headers)
    seen = Seen(request_id(r.id), prompt_tokens, max_tokens, sent, [time.monotonic()],
                [r.choices[0].text], r.usage, r.choices[0].finish_reason)
    seen.kv_transfer_params = getattr(r, "kv_transfer_params", None)
    return seen


SENT_HEADER = "x-test-request"


def client(url: str, sent: dict[str, float] | None = None) -> openai.AsyncOpenAI:
    """An ``openai`` client of ``url``; ``sent`` gets, per ``SENT_HEADER`` value, the time
    the request left (httpx's request hook: the client library's own work before it,
    which can take a while on a first call, is not the server's latency)."""

    async def stamp(request: httpx.Request) -> None:
        tag = request.headers.get(SENT_HEADER)
        if sent is not None and tag is not None:
            sent[tag] = time.monotonic()

    # TCP_NODELAY, as aiohttp (vllm bench serve's client) sets it: without it a request's
    # body waits behind its headers for the server's delayed ACK (about 40 ms)
    transport = httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=256),
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    http = httpx.AsyncClient(timeout=60.0, event_hooks={"request": [stamp]},
                             transport=transport)
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                              http_client=http)


async def load(url: str, sizes: list[tuple[int, int]], concurrency: int,
               stream_every: int = 1) -> list[Seen]:
    """Every ``(prompt, max_tokens)`` of ``sizes`` at most ``concurrency`` at a time,
    after ``concurrency`` one-token requests that open the connections (not returned);
    request ``i`` is streamed unless ``i % stream_every``."""
    sem = asyncio.Semaphore(concurrency)
    sent: dict[str, float] = {}
    async with client(url, sent) as c:

        async def one(i: int, prompt: int, out: int) -> Seen:
            tag = {SENT_HEADER: str(i)}
            async with sem:
                if i % stream_every:
                    seen = await whole_completion(c, prompt, out, extra_headers=tag)
                else:
                    seen = await stream_completion(c, prompt, out, chat=i % 3 == 1,
                                                   extra_headers=tag)
            seen.sent_s = sent[str(i)]
            return seen

        # open the connections first: a new connection's set-up is not the server's latency
        await asyncio.gather(*(whole_completion(c, 16, 1) for _ in range(concurrency)))
        return list(await asyncio.gather(*(one(i, p, o) for i, (p, o) in enumerate(sizes))))


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` parsed by the Prometheus text parser: (sample name, labels): value."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in metrics.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


def read_records(folder: Path) -> dict[int, dict[str, str]]:
    with open(folder / "requests.csv", newline="", encoding="utf-8") as f:
        return {int(r["request_id"]): r for r in csv.DictReader(f)}
