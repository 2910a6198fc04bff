"""Classes found by name: the ``kind`` a file records selects the class that reads it back."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any, ClassVar


class KindRegistry:
    """Base of a class family whose concrete members register under their ``kind``.

    The family's root declares its own ``_registry = {}``; every subclass that sets
    ``kind`` is added to it when the class is created, so a saved ``kind`` string
    finds its class (map specs, sketch files) without a hand-kept table.

    Examples
    --------
    >>> class Shape(KindRegistry):
    ...     _registry = {}
    >>> class Circle(Shape):
    ...     kind = "circle"
    >>> Shape._registry["circle"] is Circle
    True
    """

    kind: ClassVar[str] = ""
    _registry: ClassVar[dict[str, type[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            cls._registry[cls.kind] = cls


def lazy_names(package: str, homes: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` of a package whose public names load on first use (PEP 562).

    ``homes`` maps each name to the module of ``package`` that defines it; a name is
    imported from there when first asked for and kept in the package. So importing the
    package costs nothing, and a command imports only what it uses (start-up time).

    Examples
    --------
    >>> import sys, types
    >>> package = types.ModuleType("streamrff_lazy_example")
    >>> sys.modules[package.__name__] = package
    >>> package.__getattr__, package.__dir__ = lazy_names(package.__name__, {"real": "no_such_module"})
    >>> "real" in dir(package)
    True
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{homes[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
