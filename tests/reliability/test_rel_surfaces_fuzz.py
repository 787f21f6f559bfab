"""Hostile-input fuzz of the surfaces added in round 2 (issue 26, item 5): the config.json
and ``vllm serve`` importers, the transfer topology and pools, and the readers of result
files (``summary.json``, ``compare.json``). Each input either gives a result or one
``PdsimError`` (a clean ``error:`` line); never another exception, and never more than
``BUDGET_S`` seconds. Beside ``test_rel_hostile_fuzz`` (numbers in a config); scale the
examples with ``PDSIM_REL_SCALE``."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import examples, small

from pdsim.errors import PdsimError
from pdsim.loader import load_config

DATA = Path(__file__).resolve().parents[1] / "data"
BUDGET_S = 10
"""Seconds one input may take: a bound checked after the work it guards is a hang."""

FUZZ = settings(max_examples=examples(30), deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


class _Budget(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Budget


@contextmanager
def bounded(what: object) -> Iterator[None]:
    """Fail the example when the block raises anything but a ``PdsimError`` or outlasts
    ``BUDGET_S``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(BUDGET_S)
    try:
        yield
    except PdsimError as exc:
        assert str(exc).strip(), what  # an error says what is wrong
    except _Budget:
        pytest.fail(f"no answer within {BUDGET_S} s: {what!r}"[:2000])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# JSON values a careless or hostile file holds
SCALARS = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**63, 10**7, 10**19, 10**400, 0.5, 1e300,
                     float("nan"), float("inf"), -float("inf"), True, False, None, "", "8",
                     "abc", "1e400", "$\\bad$"]),
    st.integers(), st.floats(), st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=8)


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except ValueError:  # an integer beyond Python's conversion limit
        return "0"


# ------------------------------------------------------------------ config.json importer

HF_CONFIGS = sorted((DATA / "hf_configs").glob("*.config.json"))


KV = " --kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"
SERVE = "vllm serve m --tensor-parallel-size 8" + KV  # every model in tests/data fits


def _roles(prefill: str = SERVE, decode: str = SERVE) -> list[Any]:
    from pdsim.importers.deployment import RoleCommand

    return [RoleCommand(role="prefill", command=prefill, count=1, hardware="h200",
                        hardware_assumed=False),
            RoleCommand(role="decode", command=decode, count=1, hardware="h200",
                        hardware_assumed=False)]


def _import(hf: dict[str, Any], prefill: str = SERVE) -> None:
    from pdsim.importers.deployment import import_deployment
    from pdsim.importers.render import result_yaml

    result = import_deployment(_roles(prefill), hf, hf_source="config.json")
    result_yaml(result, "config.json")


@FUZZ
@given(st.sampled_from(HF_CONFIGS), st.data())
def test_config_json_values_import_or_fail_cleanly(path: Path, data: st.DataObject) -> None:
    hf = json.loads(path.read_text())
    keys = st.sampled_from([*sorted(hf), "text_config", "layer_types", "sliding_window"])
    changes = data.draw(st.dictionaries(keys, VALUES, min_size=1, max_size=3))
    hf.update(changes)
    with bounded(changes):
        _import(hf)


@FUZZ
@given(st.sampled_from(HF_CONFIGS), st.integers(1, 3000))
def test_config_json_read_from_disk_fails_cleanly(tmp_path: Path, path: Path,
                                                  depth: int) -> None:
    from pdsim.importers.hf_config import read_hf_config

    text = path.read_text()
    text = text[:-2] + f', "rope_scaling": {"[" * depth}{"]" * depth}}}'
    f = tmp_path / "config.json"
    f.write_text(text)
    with bounded(depth):
        _import(read_hf_config(f))


# ------------------------------------------------------------------ vllm serve lines

OPTIONS = ["--max-model-len", "--tensor-parallel-size", "--data-parallel-size",
           "--max-num-seqs", "--max-num-batched-tokens", "--block-size",
           "--gpu-memory-utilization", "--quantization", "--dtype", "--kv-cache-dtype",
           "--speculative-config", "--speculative-config.method",
           "--speculative-config.num_speculative_tokens",
           "--speculative-config.num_speculative_tokens.x", "--kv-transfer-config",
           "--kv-transfer-config.kv_connector", "--enable-expert-parallel",
           "--enable-chunked-prefill", "--no-enable-prefix-caching", "--served-model-name"]
ARGS = st.one_of(
    st.sampled_from(["infk", "nank", "1e400", "-5", "0", "32k", "10:20", "0x10", "nan",
                     "'{\"kv_connector\":[\"NixlConnector\"]}'",
                     "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'",
                     "'{\"method\":\"mtp\",\"num_speculative_tokens\":3,\"bogus\":1}'",
                     "'{'", "'[]'", "mtp", "ngram", "fp8", "awq", "true", "=", "''"]),
    st.integers(-10, 10**20).map(str))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(OPTIONS), ARGS), min_size=1, max_size=4))
def test_vllm_serve_lines_import_or_fail_cleanly(opts: list[tuple[str, str]]) -> None:
    hf = json.loads((DATA / "hf_configs" / "Llama-3.1-8B.config.json").read_text())
    line = SERVE + "".join(f" {o} {a}" for o, a in opts)
    with bounded(line):
        _import(hf, prefill=line)


# ------------------------------------------------------------------ topology and pools

TOPOLOGY_SETS = [
    "connector.topology.gpus_per_node", "connector.topology.nics_per_node",
    "connector.topology.nic_bandwidth_gb_per_s", "connector.topology.per_flow_cap_gb_per_s",
    "connector.topology.flows_per_rank", "connector.topology.gpus_per_instance",
    "connector.topology.placement", "connector.topology.kv_replicated_across_tp",
    "connector.link_bandwidth_gb_per_s", "faults.link_degradations",
    "cluster.decode", "cluster.prefill", "cluster.decode.count",
]
LINK_NAMES = st.sampled_from(["node0", "node1", "node01/nic00", "node0/nic9", "node99",
                              "P0->D0", "P01->D0", "P9->D9", "", "nodeX", None])
YAML_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "8", "1e308", ".nan", ".inf", "10:20", "'x'", "[]",
                     "{}", "{P0: 0, D0: 1}", "{P0: 0, D0: 99999}", "{P7: 0}", "null",
                     "[{count: 1}, {count: 1, name: decode1}]",
                     "[{count: 1, name: a}, {count: 1, name: a}]", "true"]),
    LINK_NAMES.map(lambda n: f"[{{link: {json.dumps(n)}, start_s: 0.0, end_s: 1.0, "
                             "bandwidth_factor: 0.5}]"))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(TOPOLOGY_SETS), YAML_VALUES),
                min_size=1, max_size=3))
def test_topology_and_pools_load_or_fail_cleanly(sets: list[tuple[str, str]]) -> None:
    from pdsim.simulation import Simulation

    base = small({"connector": {"topology": {"gpus_per_node": 8, "nics_per_node": 8}},
                  "workload": {"num_requests": 5}})
    overrides = [f"{k}={v}" for k, v in sets]
    with bounded(overrides):
        cfg = load_config(base, overrides)
        Simulation(cfg).run()


# ------------------------------------------------------------------ result readers


@FUZZ
@given(st.dictionaries(st.sampled_from(["name", "seed", "partial", "summary", "derived"]),
                       VALUES, max_size=3), st.data())
def test_summary_json_reads_or_fails_cleanly(run_dir: Path, patch: dict[str, Any],
                                             data: st.DataObject) -> None:
    from pdsim.plot_data import read_run_dir

    doc = json.loads((run_dir / "summary.json").read_text())
    summary = dict(doc["summary"])
    summary.update(data.draw(st.dictionaries(st.sampled_from(sorted(summary)), VALUES,
                                             max_size=3)))
    doc = {**doc, "summary": summary, **patch}
    fuzzed = run_dir.parent / "fuzzed"
    fuzzed.mkdir(exist_ok=True)
    (fuzzed / "summary.json").write_text(_json_text(doc))
    with bounded(doc):
        read_run_dir(fuzzed)


@FUZZ
@given(VALUES)
def test_compare_json_reads_or_fails_cleanly(tmp_path: Path, summaries: Any) -> None:
    from pdsim.plot_data import read_compare_json

    f = tmp_path / "compare.json"
    f.write_text(_json_text({"headline": {}, "table": [], "summaries": summaries}))
    with bounded(summaries):
        read_compare_json(f)


def test_the_fuzzers_reach_their_targets() -> None:
    """A fuzzer that only ever fails at its first line tests nothing: the unmodified
    inputs of each surface succeed."""
    calls: list[Callable[[], Any]] = [
        lambda p=p: _import(json.loads(p.read_text())) for p in HF_CONFIGS]
    calls.append(lambda: load_config(small({"connector": {"topology": {
        "gpus_per_node": 8, "nics_per_node": 8}}})))
    calls.append(lambda: _import(json.loads(HF_CONFIGS[0].read_text()),
                                 prefill=SERVE + " --max-model-len 32k"))
    for call in calls:
        call()
    assert len(calls) == len(HF_CONFIGS) + 2 >= 5
