"""The lookahead contract: the config's derived lookahead and the connector's three
backoff methods, as a table of cases (reference section 4)."""

from __future__ import annotations

import pytest
from core_support import make_config, reference_backoff, reference_lookahead

from pdsim import ConfigError, SimConfig
from pdsim.engine.connector import ConnectorScheduler, KVTransferParams, prefill_backoff

# (case, method, num_spec, num_mtp_modules, mamba, lookahead, backoff auto, backoff off)
CASES = [
    ("no speculation", "none", 0, 8, False, 0, 0, 0),
    ("ngram", "ngram", 3, 8, False, 0, 0, 0),
    ("draft model", "draft_model", 4, 8, False, 0, 0, 0),
    ("eagle", "eagle", 3, 8, False, 1, 0, 0),
    ("eagle3", "eagle3", 3, 8, False, 1, 0, 0),
    ("single-module mtp (DeepSeek-V3)", "mtp", 1, 1, False, 1, 0, 0),
    ("one module reused for N=3", "mtp", 3, 1, False, 1, 0, 0),
    ("8-module model, N=1", "mtp", 1, 8, False, 1, 0, 0),
    ("MTP N=2", "mtp", 2, 8, False, 2, 1, 0),
    ("MTP N=3", "mtp", 3, 8, False, 3, 2, 0),
    ("MTP N=8", "mtp", 8, 8, False, 8, 7, 0),
    ("Mamba", "none", 0, 8, True, 0, 1, 1),
    ("Mamba + eagle", "eagle", 2, 8, True, 1, 1, 1),
    ("Mamba + MTP N=2", "mtp", 2, 8, True, 2, 1, 1),
    ("Mamba + MTP N=3", "mtp", 3, 8, True, 3, 2, 1),
    ("Mamba + MTP N=8", "mtp", 8, 8, True, 8, 7, 1),
]
IDS = [c[0] for c in CASES]


def _cfg(method: str, n: int, modules: int, mamba: bool, backoff: str) -> SimConfig:
    return make_config(f"model.num_mtp_modules={modules}", f"connector.prefill_backoff={backoff}",
                       method=method, n_spec=n, mamba=mamba)


@pytest.mark.parametrize(("case", "method", "n", "modules", "mamba", "lookahead", "auto",
                          "off"), CASES, ids=IDS)
def test_lookahead_and_backoff_table(case: str, method: str, n: int, modules: int,
                                     mamba: bool, lookahead: int, auto: int, off: int) -> None:
    for mode, want in (("auto", auto), ("off", off)):
        cfg = _cfg(method, n, modules, mamba, mode)
        assert cfg.num_prefill_lookahead_tokens == lookahead
        assert cfg.num_prefill_lookahead_tokens == reference_lookahead(method, modules, n)
        assert cfg.use_multi_module_mtp == (method == "mtp" and min(modules, n) > 1)
        assert cfg.extra_retained_tokens == max(0, lookahead - 1)
        conn = ConnectorScheduler(cfg)
        assert conn.backoff_tokens() == want == prefill_backoff(cfg) == cfg.prefill_backoff_tokens
        assert want == reference_backoff(lookahead, mamba, mode == "auto")


@pytest.mark.parametrize(("case", "method", "n", "modules", "mamba", "lookahead", "auto",
                          "off"), CASES, ids=IDS)
@pytest.mark.parametrize("mode", ["auto", "off"])
def test_truncation_and_remote_count(case: str, method: str, n: int, modules: int,
                                     mamba: bool, lookahead: int, auto: int, off: int,
                                     mode: str) -> None:
    backoff = auto if mode == "auto" else off
    conn = ConnectorScheduler(_cfg(method, n, modules, mamba, mode))
    for L in sorted({1, 2, 3, 7, 8, 9, 100, 4097, backoff, backoff + 1}):
        if L < 1:
            continue
        params = KVTransferParams(do_remote_decode=True)
        p_len = conn.truncate_request_for_prefill(params, L)
        assert p_len == (L - backoff if backoff < L else L)
        assert params.p_side_truncated
        # Re-admission after a preemption on P: the guard keeps the first truncation.
        assert conn.truncate_request_for_prefill(params, p_len) == p_len
        assert conn.truncate_request_for_prefill(params, L) == L
        # D loads what P computed (all of a prompt too short to truncate).
        remote = conn.remote_prefill_token_count(L)
        assert remote == p_len
        if backoff < L:
            assert L - remote == L - p_len == backoff
        if backoff == 0:
            assert p_len == L == remote  # a no-op


def test_truncation_only_for_remote_decode_requests() -> None:
    conn = ConnectorScheduler(_cfg("mtp", 8, 8, False, "auto"))
    for params in (KVTransferParams(), KVTransferParams(do_remote_prefill=True)):
        assert conn.truncate_request_for_prefill(params, 500) == 500
        assert not params.p_side_truncated


def test_connector_reads_the_config_lookahead() -> None:
    """No consumer derives lookahead: the connector follows the config's property."""
    cfg = _cfg("mtp", 5, 8, False, "auto")
    assert cfg.num_prefill_lookahead_tokens == 5
    assert ConnectorScheduler(cfg).backoff_tokens() == 4


@pytest.mark.parametrize(("overrides", "where"), [
    (["speculative.num_speculative_tokens=9"], "speculative.num_speculative_tokens"),
    (["model.num_mtp_modules=0"], "speculative.method"),
    (["cluster.decode.scheduler.max_num_batched_tokens=63"],
     "cluster.decode.scheduler.max_num_batched_tokens"),
])
def test_invalid_drafter_configs_are_located(overrides: list[str], where: str) -> None:
    with pytest.raises(ConfigError) as exc:
        make_config(*overrides)
    assert where in str(exc.value)
