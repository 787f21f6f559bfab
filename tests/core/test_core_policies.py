"""The policy registry below the config: names the config accepts, classes the engine runs."""

from __future__ import annotations

import pytest
from core_support import make_config

import pdsim.engine.router as router_module
import pdsim.engine.router_scoring as scoring_module
from pdsim.errors import ConfigError
from pdsim.policies import ROUTERS, PolicyRegistry


def test_every_built_in_router_is_registered_and_built() -> None:
    built_in = {"round_robin": router_module.RoundRobin,
                "least_loaded": router_module.LeastLoaded,
                "random": router_module.RandomChoice,
                "kv_load_aware": scoring_module.KVLoadAware,
                "prefix_aware": scoring_module.PrefixAware,
                "cache_aware": scoring_module.CacheAware}
    assert list(ROUTERS) == sorted(built_in)
    for name, cls in built_in.items():
        assert ROUTERS.lookup(name) is cls
        assert make_config(f"router.policy={name}").router.policy == name


def test_unknown_router_is_a_config_error_listing_the_names() -> None:
    with pytest.raises(ConfigError) as info:
        make_config("router.policy=fastest")
    text = str(info.value)
    assert "router.policy" in text and "'fastest'" in text
    assert ("cache_aware, kv_load_aware, least_loaded, prefix_aware, random, round_robin"
            in text)


def test_registry_refuses_a_name_twice_and_reports_unknown_names() -> None:
    reg = PolicyRegistry("test.policy")

    @reg.register("a")
    class A:
        pass

    assert "a" in reg and "b" not in reg and len(reg) == 1
    assert reg.lookup("a") is A
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(A)
    with pytest.raises(KeyError):
        reg.lookup("b")
