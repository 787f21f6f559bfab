"""The HTTP side of ``pdsim serve``: vLLM's OpenAI-compatible routes on Starlette.

``ServeState`` holds the live cluster, its clock and driver, the metrics and the request
log; ``build_app(state, instance)`` makes the app of one port: the main port
(``instance`` None: the built-in proxy, which lets the configured router pick the
instances and makes the P -> D hand-over itself) or one instance's port under
``--pd-endpoints`` (vLLM's disaggregated semantics, below).

A prefill instance's port takes requests carrying ``kv_transfer_params:
{do_remote_decode: true}``: it prefills the prompt, answers with the one token it sampled
and the ``kv_transfer_params`` a decode instance needs (``do_remote_prefill``,
``remote_engine_id``, ``remote_block_ids``, ``remote_request_id``, ...), and keeps the KV
blocks for the connector's lease. A decode instance's port takes the same request with
those params: it pulls the KV over the simulated connector from the instance named, then
decodes. A colocated instance's port serves requests whole.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pdsim._version import __version__
from pdsim.config import Role, SimConfig
from pdsim.rng import RandomStreams
from pdsim.serve.clock import Clock, Driver
from pdsim.serve.live import Event, LiveCluster, LiveRequest
from pdsim.serve.metrics import ServeMetrics
from pdsim.serve.protocol import APIError, ParsedRequest, context_error, parse_request, token_text
from pdsim.workload import sample_lengths


class Channel:
    """A request's events, from the driver to its HTTP handler."""

    def __init__(self) -> None:
        self.items: deque[Event] = deque()
        self.ready = asyncio.Event()

    def put(self, ev: Event) -> None:
        self.items.append(ev)
        self.ready.set()

    async def get(self) -> Event:
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        return self.items.popleft()


class ServeState:
    """Everything the ports share."""

    def __init__(self, config: SimConfig, speed: float = 1.0, model_name: str | None = None,
                 max_pending: int | None = None, host: str = "127.0.0.1",
                 warn: Any = None) -> None:
        self.cluster = LiveCluster(config)
        self.config = self.cluster.config
        self.clock = Clock(speed)
        self.model_name = model_name or config.model.name
        self.metrics = ServeMetrics(self.cluster, self.model_name, speed)
        self.driver = Driver(self.cluster, self.clock, warn)
        self.max_pending = max_pending
        self.host = host
        self.ports: dict[str, int] = {}  # instance name -> its port (--pd-endpoints)
        self.lengths = RandomStreams(config.seed).get("serve_output_tokens")
        # (arrival_s, prompt tokens, output tokens) of every request admitted, in order
        self.log: list[tuple[float, int, int]] = []
        self._logged: dict[int, int] = {}  # request id -> its row of the log
        self.client_handovers = 0  # requests whose P -> D hand-over a client made
        self.created = int(time.time())

    # ---------------------------------------------------------------- intake

    def output_target(self, p: ParsedRequest) -> tuple[int, str]:
        """Output tokens the request generates and its finish reason (protocol's rule)."""
        limit = self.cluster.max_model_len
        m = p.max_tokens
        if m is None:
            if p.prompt_tokens >= limit:
                raise context_error(limit, p.prompt_tokens, None)
            m = limit - p.prompt_tokens
        elif p.prompt_tokens + m > limit:
            raise context_error(limit, p.prompt_tokens, m)
        if p.ignore_eos:
            target = m
        else:
            draw = int(sample_lengths(self.config.workload.output_tokens, 1, self.lengths)[0])
            target = min(m, max(p.min_tokens, draw, 1))
        return target, "length" if target == m else "stop"

    def _check_room(self) -> None:
        if self.max_pending is not None and len(self.cluster.live) >= self.max_pending:
            raise APIError(f"pdsim serve has {len(self.cluster.live)} requests in flight "
                           f"(--max-pending {self.max_pending}); retry later", 503,
                           "ServiceUnavailableError")

    def _arrival(self) -> float:
        clock = self.clock
        if not clock.started:
            clock.start()
            return 0.0
        self.driver.catch_up()
        return self.cluster.arrival_after(clock.sim_now())

    def admit(self, p: ParsedRequest, instance: str | None, hop: str
              ) -> tuple[LiveRequest, Channel, int, str]:
        """Admit a request now; its events go to the returned channel."""
        self._check_room()
        if hop == "prefill":  # P runs it with max_tokens = 1, as a P/D proxy sends it
            limit = self.cluster.max_model_len
            if p.prompt_tokens + 1 > limit:
                raise context_error(limit, p.prompt_tokens, 1)
            target, reason = 1, "length"
        else:
            target, reason = self.output_target(p)
        fit_out = 1 if hop == "prefill" else target
        if not self.cluster.fits(p.prompt_tokens, fit_out):
            raise APIError(f"the request ({p.prompt_tokens} prompt + {fit_out} output tokens) "
                           f"does not fit the KV cache of any instance")
        chan = Channel()
        arrival = self._arrival()
        lr = self.cluster.submit(p.prompt_tokens, target, arrival, chan.put, instance=instance,
                                 hop=hop, finish_reason=reason)
        self._logged[lr.req.id] = len(self.log)
        self.log.append((arrival, p.prompt_tokens, target))
        if hop == "prefill":
            self.client_handovers += 1
        self.driver.poke()
        return lr, chan, target, reason

    def forward(self, p: ParsedRequest, d_name: str) -> tuple[LiveRequest, Channel, int, str]:
        """A decode instance's hop of a request a prefill instance holds."""
        kv = p.kv_transfer_params or {}
        rid = kv.get("remote_request_id")
        req = self.cluster.held_request(int(rid)) if isinstance(rid, str) and rid.isdigit() \
            else None
        if req is None:
            raise APIError(f"kv_transfer_params.remote_request_id {rid!r} names no request a "
                           f"prefill instance holds", param="kv_transfer_params")
        if kv.get("remote_engine_id") not in (None, req.p_instance):
            raise APIError(f"request {rid} was prefilled on {req.p_instance}, not "
                           f"{kv.get('remote_engine_id')!r}", param="kv_transfer_params")
        if p.prompt_tokens != req.prompt_tokens:
            raise APIError(f"the prompt has {p.prompt_tokens} tokens; the prefilled one had "
                           f"{req.prompt_tokens}", param="prompt")
        target, reason = self.output_target(p)
        if not self.cluster.fits(p.prompt_tokens, target):
            raise APIError(f"the request ({p.prompt_tokens} prompt + {target} output tokens) "
                           f"does not fit the KV cache of any instance")
        self._check_room()
        chan = Channel()
        at = self._arrival()  # the hand-over reaches D now, never in the simulated past
        lr = self.cluster.forward(req, d_name, target, at, chan.put, reason)
        row = self._logged[req.id]  # the log holds what the request generates in the end
        self.log[row] = (*self.log[row][:2], target)
        self.driver.poke()
        return lr, chan, target, reason

    def kv_params(self, lr: LiveRequest) -> dict[str, Any]:
        """What a prefill instance answers for the decode instance (vLLM NIXL's keys)."""
        req = lr.req
        params = req.kv_params
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": req.p_instance,
            "remote_block_ids": list(params.remote_block_ids) if params is not None else [],
            "remote_request_id": str(req.id),
            "remote_host": self.host,
            "remote_port": self.ports.get(req.p_instance, 0),
            "tp_size": 1,
        }


# -------------------------------------------------------------------- responses


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _failure(reason: str) -> APIError:
    """The error of a request the simulated cluster failed or rejected."""
    if reason == "no_instance_up":
        return APIError("no instance is up to serve the request", 503,
                        "ServiceUnavailableError")
    if reason.startswith("exceeds_"):  # the cluster's admission refused it
        return APIError(f"the request cannot be served by this cluster ({reason})")
    return APIError(f"the request failed in the simulated cluster ({reason})", 500,
                    "InternalServerError")


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": None}


class _Reply:
    """Builds one request's response bodies (completion or chat; chunk or whole)."""

    def __init__(self, state: ServeState, p: ParsedRequest, lr: LiveRequest, reason: str
                 ) -> None:
        self.state = state
        self.p = p
        self.lr = lr
        self.reason = reason
        self.rid = (f"chatcmpl-{lr.req.id}" if p.chat else f"cmpl-{lr.req.id}")
        self.sent = 0  # tokens whose text went out
        self.started = False  # a chat's first chunk carries the role

    def text(self, n: int) -> str:
        t = token_text(self.lr.req.id, self.sent, n)
        self.sent += n
        return t

    def head(self, chunk: bool) -> dict[str, Any]:
        obj = ("chat.completion.chunk" if chunk else "chat.completion") if self.p.chat else \
            "text_completion"
        return {"id": self.rid, "object": obj, "created": self.state.created,
                "model": self.state.model_name}

    def chunk(self, text: str, finish: str | None) -> dict[str, Any]:
        body = self.head(True)
        if self.p.chat:
            delta: dict[str, Any] = {"content": text}
            if not self.started:
                delta = {"role": "assistant", "content": text}
                self.started = True
            body["choices"] = [{"index": 0, "delta": delta, "logprobs": None,
                                "finish_reason": finish}]
        else:
            body["choices"] = [{"index": 0, "text": text, "logprobs": None,
                                "finish_reason": finish, "stop_reason": None}]
        return body

    def whole(self, text: str, completion: int) -> dict[str, Any]:
        body = self.head(False)
        if self.p.chat:
            body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text,
                                                        "tool_calls": []},
                                "logprobs": None, "finish_reason": self.reason,
                                "stop_reason": None}]
        else:
            body["choices"] = [{"index": 0, "text": text, "logprobs": None,
                                "finish_reason": self.reason, "stop_reason": None,
                                "prompt_logprobs": None}]
        body["usage"] = _usage(self.p.prompt_tokens, completion)
        if self.lr.hop == "prefill":
            body["kv_transfer_params"] = self.state.kv_params(self.lr)
        return body


async def _events(chan: Channel, lr: LiveRequest) -> AsyncIterator[tuple[int, Event | None]]:
    """(new tokens, the final event if this step was the last) per step the client
    sees; the final step's tokens and the end arrive together, as vLLM sends them."""
    while True:
        ev = await chan.get()
        if ev.kind == "transfer" or (ev.kind == "prefilled" and lr.hop != "prefill"):
            continue
        if ev.kind == "prefilled":
            yield 1, ev
            return
        if ev.kind == "done":
            yield 0, ev
            return
        nxt = chan.items[0] if chan.items else None
        if nxt is not None and nxt.kind == "done" and nxt.error is None:
            chan.items.popleft()
            yield ev.tokens, nxt
            return
        yield ev.tokens, None


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _stream(reply: _Reply, chan: Channel) -> AsyncIterator[str]:
    total = 0
    async for n, end in _events(chan, reply.lr):
        if end is not None and end.error is not None:
            yield _sse(_failure(end.error).body())
            break
        total += n
        if n or end is not None:
            yield _sse(reply.chunk(reply.text(n), reply.reason if end is not None else None))
    else:  # pragma: no cover - the events always end with a final one
        pass
    if reply.p.include_usage:
        body = reply.head(True)
        body["choices"] = []
        body["usage"] = _usage(reply.p.prompt_tokens, total)
        yield _sse(body)
    yield "data: [DONE]\n\n"


async def _whole(reply: _Reply, chan: Channel) -> JSONResponse:
    total = 0
    parts = []
    async for n, end in _events(chan, reply.lr):
        if end is not None and end.error is not None:
            return _error(_failure(end.error))
        total += n
        parts.append(reply.text(n))
    return JSONResponse(reply.whole("".join(parts), total))


# ----------------------------------------------------------------------- routes


def build_app(state: ServeState, instance: str | None = None) -> Starlette:
    """The app of the main port (``instance`` None) or of one instance's port."""
    inst = state.cluster.instance(instance) if instance is not None else None

    async def generate(request: Request, chat: bool) -> Response:
        try:
            try:
                body = await request.json()
            except ValueError:
                raise APIError("the request body is not valid JSON") from None
            p = parse_request(body, chat)
            if p.model is not None and p.model != state.model_name:
                raise APIError(f"The model `{p.model}` does not exist.", 404, "NotFoundError",
                               "model")
            kv = p.kv_transfer_params or {}
            if inst is None or inst.role is Role.COLOCATED:
                lr, chan, _, reason = state.admit(p, instance, "full")
            elif inst.role is Role.PREFILL:
                if not kv.get("do_remote_decode"):
                    raise APIError(f"{inst.name} is a prefill instance: send it requests with "
                                   f"kv_transfer_params.do_remote_decode = true",
                                   param="kv_transfer_params")
                lr, chan, _, reason = state.admit(p, instance, "prefill")
            else:
                if not kv.get("do_remote_prefill"):
                    raise APIError(f"{inst.name} is a decode instance: send it requests with "
                                   f"the kv_transfer_params a prefill instance returned",
                                   param="kv_transfer_params")
                lr, chan, _, reason = state.forward(p, inst.name)
        except APIError as exc:
            return _error(exc)
        reply = _Reply(state, p, lr, reason)
        if p.stream:
            return StreamingResponse(_stream(reply, chan), media_type="text/event-stream")
        return await _whole(reply, chan)

    async def completions(request: Request) -> Response:
        return await generate(request, False)

    async def chat(request: Request) -> Response:
        return await generate(request, True)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": state.model_name, "object": "model", "created": state.created,
            "owned_by": "pdsim", "root": state.model_name, "parent": None,
            "max_model_len": state.cluster.max_model_len, "permission": []}]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": __version__})

    async def metrics(request: Request) -> Response:
        state.driver.catch_up()
        state.metrics.lag_s = state.driver.lag_s
        text = generate_latest(state.metrics.registry).decode("utf-8")
        if instance is not None:
            text = only_engine(text, instance)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ])


def only_engine(text: str, engine: str) -> str:
    """The exposition ``text`` with only the samples of ``engine`` (and those without an
    engine label): what that instance's own ``/metrics`` shows."""
    mark = f'engine="{engine}"'
    keep = [line for line in text.splitlines()
            if line.startswith("#") or "engine=" not in line or mark in line]
    return "\n".join(keep) + "\n"
