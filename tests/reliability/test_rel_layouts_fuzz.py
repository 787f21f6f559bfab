"""Hostile fuzz of model KV layouts against pool sizes (issue 26, item 5: the all-sliding
models the pools refused): random layer groups (full attention, sliding windows, Mamba
states, any mix, none of some), block sizes, pools given in blocks or GiB, drafters and
step times of the root or a pool's own. Each config either loads and runs, accounting for
every request, or fails with one ``PdsimError``, within ``BUDGET_S`` seconds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rel_support import small
from test_rel_surfaces_fuzz import FUZZ, bounded

from pdsim.loader import load_config

GROUP = st.one_of(
    st.fixed_dictionaries({"kind": st.just("attention"), "num_layers": st.integers(1, 64),
                           "kv_bytes_per_token_per_layer": st.sampled_from([0, 1, 256, 4096])}),
    st.fixed_dictionaries({"kind": st.just("sliding_window"),
                           "num_layers": st.integers(1, 64),
                           "kv_bytes_per_token_per_layer": st.sampled_from([0, 1, 256, 4096]),
                           "window_tokens": st.sampled_from([1, 15, 16, 17, 64, 4096, 2**20])}),
    st.fixed_dictionaries({"kind": st.just("mamba"), "num_layers": st.integers(1, 8),
                           "state_bytes_per_layer": st.sampled_from([0, 1, 2**20, 2**30])}))
POOL = st.one_of(st.fixed_dictionaries({"scheduler": st.fixed_dictionaries({
    "num_blocks": st.sampled_from([1, 8, 512, 4096, 65536]),
    "block_size": st.sampled_from([1, 16, 64])})}),
    st.fixed_dictionaries({"kv_cache_gib": st.sampled_from([1e-6, 0.01, 1.0, 64.0]),
                           "scheduler": st.fixed_dictionaries({
                               "num_blocks": st.none(),
                               "block_size": st.sampled_from([16, 64])})}))
SPEC = st.sampled_from([
    {"method": "none", "num_speculative_tokens": 0,
     "acceptance": {"kind": "constant", "rate": 0.0}},
    {"method": "mtp", "num_speculative_tokens": 3,
     "acceptance": {"kind": "constant", "rate": 0.6}},
    {"method": "eagle3", "num_speculative_tokens": 2,
     "acceptance": {"kind": "constant", "rate": 0.5}}])


@FUZZ
@given(st.lists(GROUP, min_size=1, max_size=3), POOL, POOL, SPEC,
       st.sampled_from([64, 2048, 32768]))
def test_kv_layouts_and_pools_load_and_run_or_fail_cleanly(
        groups: list[dict[str, Any]], prefill: dict[str, Any], decode: dict[str, Any],
        spec: dict[str, Any], max_model_len: int) -> None:
    from pdsim.simulation import simulate

    data = small({"model": {"layer_groups": groups, "max_model_len": max_model_len},
                  "speculative": spec, "workload": {"num_requests": 6}})
    for role, pool in (("prefill", prefill), ("decode", decode)):
        data["cluster"][role] = {**data["cluster"][role], **{
            k: v for k, v in pool.items() if k != "scheduler"}}
        data["cluster"][role]["scheduler"] = {**data["cluster"][role]["scheduler"],
                                              **pool["scheduler"]}
        if data["cluster"][role]["scheduler"]["num_blocks"] is None:
            del data["cluster"][role]["scheduler"]["num_blocks"]
    with bounded(data):
        cfg = load_config(data)
        s = simulate(cfg).summary
        assert s.completed + s.failed + s.rejected + s.in_flight == 6, s
        layout = cfg.kv_layout(16)
        assert layout.blocks_for(0) <= layout.blocks_for(10**6)  # never shrinks
