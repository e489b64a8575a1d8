"""A tiny name → class registry shared by MI estimators, shapers and attackers.

Families are chosen by name on the command line and in manifests, so an unknown name must fail
with the list of valid ones rather than a KeyError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from shared.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps kebab-case names to classes of one family."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._items: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._items:
                raise ValueError(f"{self.family} {name!r} is registered twice")
            self._items[name] = cls
            cls.name = name  # type: ignore[attr-defined]
            return cls

        return decorator

    def get(self, name: str) -> type[T]:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items))
            raise ConfigError(
                f"unknown {self.family} {name!r}; valid names: {valid}"
            ) from None

    def create(self, name: str, **params: object) -> T:
        return self.get(name)(**params)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
