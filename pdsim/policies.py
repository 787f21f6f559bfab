"""Registries of pluggable policies, below the config so it can check a name without
importing the engine.

A registry maps the names a config field accepts (``router.policy``) to the policy classes
that implement them. The engine registers its classes at import time
(``@ROUTERS.register("least_loaded")`` in ``pdsim.engine.router``); importing ``pdsim``
imports the engine, so every built-in policy is registered before any config is validated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

C = TypeVar("C", bound=type)


class PolicyRegistry:
    """The policy classes one config field can name."""

    __slots__ = ("_classes", "field")

    def __init__(self, field: str) -> None:
        self.field = field
        self._classes: dict[str, type] = {}

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: make ``cls`` available as ``<field>: name``."""

        def deco(cls: C) -> C:
            if name in self._classes:
                raise ValueError(f"{self.field}: {name!r} is registered twice")
            self._classes[name] = cls
            return cls

        return deco

    def lookup(self, name: str) -> type:
        """The class registered as ``name``; ``KeyError(name)`` when there is none."""
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._classes))

    def __len__(self) -> int:
        return len(self._classes)


ROUTERS = PolicyRegistry("router.policy")
DP_BALANCERS = PolicyRegistry("cluster.<role>.attention_dp_balance")
