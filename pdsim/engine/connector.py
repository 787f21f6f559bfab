"""The NIXL-like KV connector: scheduler side (backoff arithmetic) and transfer side.

The scheduler side owns the three methods PR #55055 unified. All of them read the one
backoff the config derives (``prefill_backoff_tokens``, from ``num_prefill_lookahead_tokens``);
none derives lookahead or backoff itself.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdsim.config import SimConfig
from pdsim.facts import RateSamples

if TYPE_CHECKING:
    from collections.abc import Callable

    import simpy


@dataclass(slots=True)
class KVTransferParams:
    """What P returns to the proxy and the proxy forwards to D (vLLM's kv_transfer_params).

    ``p_side_truncated`` is set once P has dropped the backoff tokens, so a request that is
    preempted on P and re-admitted is never truncated twice.
    """

    do_remote_decode: bool = False
    do_remote_prefill: bool = False
    remote_engine_id: str = ""
    remote_num_tokens: int = 0
    remote_block_ids: tuple[int, ...] = ()
    p_side_truncated: bool = False


class ConnectorScheduler:
    """Scheduler-side connector logic: how much P computes and how much D loads."""

    __slots__ = ("_backoff",)

    def __init__(self, cfg: SimConfig) -> None:
        self._backoff = cfg.prefill_backoff_tokens

    def backoff_tokens(self) -> int:
        """Trailing prompt tokens P leaves for D to recompute (vLLM's
        ``_prefill_backoff()``): the config's ``prefill_backoff_tokens`` (derived there,
        next to the lookahead it comes from)."""
        return self._backoff

    def truncate_request_for_prefill(self, params: KVTransferParams,
                                     prompt_tokens: int) -> int:
        """P side: the prompt length P computes for a ``do_remote_decode`` request (vLLM's
        ``_truncate_request_for_prefill``).

        Drops ``backoff_tokens()`` trailing tokens (when the prompt is longer than the
        backoff) and marks the params so a re-admitted request keeps its first truncation.
        The caller forces ``max_tokens = 1``.
        """
        if not params.do_remote_decode:
            return prompt_tokens
        backoff = self.backoff_tokens()
        if params.p_side_truncated:
            return prompt_tokens
        params.p_side_truncated = True
        if backoff and prompt_tokens > backoff:
            return prompt_tokens - backoff
        return prompt_tokens

    def remote_prefill_token_count(self, prompt_tokens: int) -> int:
        """D side: prompt tokens D loads from P (vLLM's ``_get_remote_prefill_token_count``):
        ``L - backoff`` when ``L > backoff``, else all
        ``L`` (P did not truncate a prompt that short, so its KV covers the whole prompt;
        D then recomputes only the last token, as before the fix)."""
        backoff = self.backoff_tokens()
        if prompt_tokens > backoff:
            return prompt_tokens - backoff
        return prompt_tokens


def prefill_backoff(cfg: SimConfig) -> int:
    """The connector's ``backoff_tokens()`` for ``cfg``: ``cfg.prefill_backoff_tokens``."""
    return cfg.prefill_backoff_tokens


@dataclass(slots=True)
class _Flow:
    tid: int
    finish_tag: float  # the link's service count at which its last byte lands
    on_done: Callable[[float], None]
    started_s: float


@dataclass
class Link:
    """One P->D link; active transfers share its bandwidth equally (processor sharing).

    Every active flow receives the same service, so the link keeps one counter, the bytes
    each active flow has received since the link started (``_service``), and a flow with
    ``b`` bytes to move that starts when the counter reads ``s`` finishes when it reads
    ``s + b``: a heap of those finish tags gives the next completion, and an event costs
    O(log flows) instead of touching every flow. ``bandwidth_bytes_per_s`` may be changed
    at any time through ``set_bandwidth`` (link degradation); progress up to that moment
    is kept.
    """

    env: simpy.Environment
    name: str
    bandwidth_bytes_per_s: float
    _flows: dict[int, _Flow] = field(default_factory=dict)
    _tags: list[tuple[float, int]] = field(default_factory=list)  # heap; may hold cancelled
    _service: float = 0.0
    _last_s: float = 0.0
    _gen: int = 0
    bytes_moved: float = 0.0
    busy_s: float = 0.0
    samples: RateSamples = field(default_factory=RateSamples)

    @property
    def active(self) -> int:
        return len(self._flows)

    def start(self, tid: int, nbytes: float, on_done: Callable[[float], None]) -> None:
        """Begin moving ``nbytes``; ``on_done(now)`` is called when the last byte lands."""
        self._advance()
        tag = self._service + float(nbytes)
        self._flows[tid] = _Flow(tid, tag, on_done, self.env.now)
        heapq.heappush(self._tags, (tag, tid))
        self._reschedule()

    def cancel(self, tid: int) -> bool:
        """Abort a transfer (e.g. on failure); True if it was active."""
        self._advance()
        found = self._flows.pop(tid, None) is not None
        self._reschedule()
        return found

    def set_bandwidth(self, bandwidth_bytes_per_s: float) -> None:
        self._advance()
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self._reschedule()

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last_s
        if dt > 0 and self._flows:
            self._service += self.bandwidth_bytes_per_s / len(self._flows) * dt
            self.bytes_moved += self.bandwidth_bytes_per_s * dt
            self.busy_s += dt
        self._last_s = now

    def _head(self) -> tuple[float, int] | None:
        """The earliest finish tag of an active flow (dropping cancelled entries)."""
        tags, flows = self._tags, self._flows
        while tags:
            tag, tid = tags[0]
            flow = flows.get(tid)
            if flow is not None and flow.finish_tag == tag:
                return tag, tid
            heapq.heappop(tags)
        return None

    def _reschedule(self) -> None:
        self._gen += 1
        self.samples.append((self.env.now, self.bandwidth_bytes_per_s if self._flows else 0.0))
        head = self._head()
        if head is None:
            return
        gen = self._gen
        tag, tid = head
        share = self.bandwidth_bytes_per_s / len(self._flows)
        delay = max(0.0, tag - self._service) / share
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _e: self._on_timer(gen, tid))

    def _on_timer(self, gen: int, tid: int) -> None:
        if gen != self._gen:
            return  # superseded by a later start/cancel
        self._advance()
        # The flow the timer was set for is done whatever float rounding left of it; any
        # other flow within a byte of done finishes with it.
        done = []
        while (head := self._head()) is not None and (
                head[1] == tid or head[0] - self._service < 1.0):
            heapq.heappop(self._tags)
            done.append(self._flows.pop(head[1]))
        if len(done) > 1:
            done.sort(key=lambda f: f.tid)
        self._reschedule()
        now = self.env.now
        for f in done:
            f.on_done(now)
