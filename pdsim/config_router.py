"""Checks of the router section against the policy it names: which weights a policy reads
(its class's ``weight_fields``, ``pdsim.policies``) and which options apply to it."""

from __future__ import annotations

from pdsim.config_sections import CacheAwareRouting, RouterConfig, RouterWeights
from pdsim.policies import ROUTERS


def router_weight_issues(router: RouterConfig) -> list[tuple[str, str]]:
    """``router.weights`` and ``router.cache_aware`` against what the policy reads (its
    class's ``weight_fields``): nothing changed from its default that the policy does not
    read, and not every weight it reads 0. Judged by value, not by which keys the YAML
    gave, so a dumped config (``config.resolved.yaml``) loads again."""
    policy, weights = router.policy, router.weights
    reads: tuple[str, ...] = getattr(ROUTERS.lookup(policy), "weight_fields", ())
    default = RouterWeights()
    changed = [name for name in RouterWeights.model_fields
               if getattr(weights, name) != getattr(default, name)]
    issues: list[tuple[str, str]] = []
    if policy != "cache_aware" and router.cache_aware != CacheAwareRouting():
        issues.append(("router.cache_aware", f"applies to policy cache_aware only (the "
                       f"policy is {policy}); remove it"))
    if not reads:
        if changed:
            issues.append(("router.weights", f"policy {policy} reads no weights "
                           f"({', '.join(changed)} set); remove them or choose a scoring "
                           f"policy (kv_load_aware, prefix_aware)"))
        return issues
    issues += [(f"router.weights.{name}", f"policy {policy} does not read it; it reads "
                f"{', '.join(reads)}") for name in changed if name not in reads]
    if not any(getattr(weights, name) > 0 for name in reads):
        issues.append(("router.weights", f"every weight policy {policy} reads "
                       f"({', '.join(reads)}) is 0; give at least one a positive weight"))
    return issues
