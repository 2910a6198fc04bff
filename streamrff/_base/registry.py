"""Classes found by name: the ``kind`` a file records selects the class that reads it back."""

from __future__ import annotations

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
