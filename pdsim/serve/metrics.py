"""``/metrics``: the live cluster under vLLM's metric names and types, one label set per
instance (``model_name``, ``engine`` = the instance's name), through ``prometheus_client``.

What each instance counts, as a vLLM engine in that role would:

- a prefill instance (P): per request it prefilled, ``request_success`` (reason
  ``length``: P runs it with ``max_tokens = 1``), its prompt as P ran it (after the
  backoff's truncation) in ``prompt_tokens`` and the one token it sampled in
  ``generation_tokens``;
- a decode or colocated instance: per request that ended on it, ``request_success`` (with
  its ``finished_reason``), its prompt in ``prompt_tokens``, and every token it emitted
  in ``generation_tokens`` (counted per step, as they stream); TTFT, inter-token gaps
  (one per step after the first) and end-to-end latency, from the request's arrival at
  the cluster, in simulated seconds (the records' own figures); the ``spec_decode_*``
  counters (``num_accepted_tokens_per_pos`` by ``position``), added when the request
  ends; under P/D the NIXL transfer metrics of the KV it pulled.

Latencies are simulated seconds: at ``--speed 10`` the client sees them ten times shorter;
``pdsim:clock_speed`` says the factor and ``pdsim:clock_lag_seconds`` how far (wall
seconds) the server trailed the clock at its last pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pdsim.config import Role

if TYPE_CHECKING:
    from pdsim.serve.live import Event, LiveCluster, LiveRequest

# bucket bounds as vLLM's v1 loggers use them (vllm/v1/metrics/loggers.py), in seconds
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# the NIXL connector's (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py)
XFER_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
BYTES_BUCKETS = tuple(float(2 ** k) for k in range(20, 36, 2))


class _Gauges(Collector):
    """The per-instance gauges, read from the engine at scrape time."""

    def __init__(self, metrics: ServeMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.m
        labels = ["model_name", "engine"]
        running = GaugeMetricFamily("vllm:num_requests_running",
                                    "Number of requests in model execution batches.",
                                    labels=labels)
        waiting = GaugeMetricFamily("vllm:num_requests_waiting",
                                    "Number of requests waiting to be processed "
                                    "(queued or receiving KV).", labels=labels)
        usage = GaugeMetricFamily("vllm:kv_cache_usage_perc",
                                  "KV-cache usage. 1 means 100 percent usage.", labels=labels)
        for inst in m.cluster.instances():
            lv = [m.model_name, inst.name]
            state = inst.routing_state()  # vLLM's three gauges, as the routers read them
            running.add_metric(lv, float(state.running))
            waiting.add_metric(lv, float(state.waiting))
            usage.add_metric(lv, state.kv_usage)
        yield running
        yield waiting
        yield usage
        speed = GaugeMetricFamily("pdsim:clock_speed", "Simulated seconds per wall second "
                                  "(--speed): every latency the client sees is divided by it.")
        speed.add_metric([], m.speed)
        yield speed
        lag = GaugeMetricFamily("pdsim:clock_lag_seconds", "How far (wall seconds) the server "
                                "trailed the simulated clock at its last pass (0: on time).")
        lag.add_metric([], m.lag_s)
        yield lag
        sim_t = GaugeMetricFamily("pdsim:simulated_time_seconds", "The simulated clock.")
        sim_t.add_metric([], m.cluster.now_s)
        yield sim_t


class ServeMetrics:
    """The registry ``/metrics`` exposes, kept up to date from the cluster's events."""

    def __init__(self, cluster: LiveCluster, model_name: str, speed: float) -> None:
        self.cluster = cluster
        self.model_name = model_name
        self.speed = speed
        self.lag_s = 0.0
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        lab = ["model_name", "engine"]
        self.success = Counter("vllm:request_success", "Count of successfully processed "
                               "requests.", [*lab, "finished_reason"], registry=reg)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                              lab, registry=reg)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens "
                                  "processed.", lab, registry=reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to "
                              "first token in seconds.", lab, buckets=TTFT_BUCKETS_S,
                              registry=reg)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token "
                             "latency in seconds.", lab, buckets=ITL_BUCKETS_S, registry=reg)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request "
                             "latency in seconds.", lab, buckets=E2E_BUCKETS_S, registry=reg)
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                              lab, registry=reg)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens",
                                    "Number of draft tokens.", lab, registry=reg)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens",
                                "Number of accepted tokens.", lab, registry=reg)
        self.accepted_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                    "Accepted tokens per draft position.", [*lab, "position"],
                                    registry=reg)
        self.xfer_time = Histogram("vllm:nixl_xfer_time_seconds", "Histogram of transfer "
                                   "duration for NIXL KV Cache transfers.", lab,
                                   buckets=XFER_BUCKETS_S, registry=reg)
        self.xfer_bytes = Histogram("vllm:nixl_bytes_transferred", "Histogram of bytes "
                                    "transferred per NIXL KV Cache transfers.", lab,
                                    buckets=BYTES_BUCKETS, registry=reg)
        self.xfer_failed = Counter("vllm:nixl_num_failed_transfers", "Number of failed NIXL "
                                   "KV Cache transfers.", lab, registry=reg)
        reg.register(_Gauges(self))
        self.n_spec = cluster.config.speculative.num_speculative_tokens
        # every series exists from the start (a scrape before any request reads zeros)
        for inst in cluster.instances():
            lv = (model_name, inst.name)
            self.prompt.labels(*lv)
            self.generation.labels(*lv)
            if inst.role is Role.PREFILL:
                continue
            for h in (self.ttft, self.itl, self.e2e):
                h.labels(*lv)
            if self.n_spec:
                for c in (self.drafts, self.draft_tokens, self.accepted):
                    c.labels(*lv)
                for pos in range(self.n_spec):
                    self.accepted_pos.labels(*lv, str(pos))
            if inst.role is Role.DECODE:
                self.xfer_time.labels(*lv)
                self.xfer_bytes.labels(*lv)
                self.xfer_failed.labels(*lv)
        self._last_token_s: dict[int, float] = {}
        cluster.observers.append(self.observe)

    def observe(self, lr: LiveRequest, ev: Event) -> None:
        """Count one event of ``lr`` (called before ``lr`` records it)."""
        req = lr.req
        mn = self.model_name
        if ev.kind == "prefilled":
            p = (mn, req.p_instance)
            self.success.labels(*p, "length").inc()
            self.prompt.labels(*p).inc(req.p_prompt_tokens)
            self.generation.labels(*p).inc()
            return
        d = (mn, req.d_instance)
        if ev.kind == "tokens":
            self.generation.labels(*d).inc(ev.tokens)
            last = self._last_token_s.get(req.id)
            if last is None:
                self.ttft.labels(*d).observe(ev.at_s - req.arrival_s)
            else:
                self.itl.labels(*d).observe(ev.at_s - last)
            self._last_token_s[req.id] = ev.at_s
        elif ev.kind == "transfer":
            self.xfer_time.labels(*d).observe(req.transfer_end_s - req.transfer_start_s)
            self.xfer_bytes.labels(*d).observe(float(req.kv_bytes))
        elif ev.kind == "done":
            self._last_token_s.pop(req.id, None)
            if ev.error is not None:
                if ev.error.startswith("kv_") and req.d_instance:
                    self.xfer_failed.labels(*d).inc()
                return
            self.success.labels(*d, lr.finish_reason).inc()
            self.prompt.labels(*d).inc(req.prompt_tokens)
            self.e2e.labels(*d).observe(req.finish_s - req.arrival_s)
            if self.n_spec:
                self.drafts.labels(*d).inc(req.num_drafts)
                self.draft_tokens.labels(*d).inc(req.num_draft_tokens)
                self.accepted.labels(*d).inc(req.num_accepted_tokens)
                for pos, n in enumerate(req.accepted_per_pos.tolist()):
                    self.accepted_pos.labels(*d, str(pos)).inc(n)
