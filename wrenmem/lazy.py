"""Modules imported on first use, declared once at the top of the module that uses them.

A one-shot command must not pay for modules only other commands need (importing every module
``Memory`` can call costs about 80 ms). The ``TYPE_CHECKING`` twin keeps the calls
type-checked and the layer contracts in force (docs/architecture.md)::

    if TYPE_CHECKING:
        from wrenmem.pairs import store
    else:
        store = lazy("wrenmem.pairs.store")  # imported at the first ``store.x``

``importlib.util.LazyLoader`` would import a module's parent package at once, which for
``wrenmem.knowledge`` loads what it should not.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it. Each read
    looks the attribute up in the real module, so a test's ``monkeypatch`` of it holds."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy(name: str) -> Any:
    """The module ``name``, imported when first used (see :class:`LazyModule`)."""
    return LazyModule(name)


def lazies(package: str, names: str) -> tuple[Any, ...]:
    """The modules ``package.<name>`` for each of the space-separated ``names``, lazily."""
    return tuple(LazyModule(f"{package}.{name}") for name in names.split())
