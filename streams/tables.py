"""A typed view over a faust table whose values are JSON objects (plain dicts).

The engine works on `MutableMapping[str, State]`; replay passes a dict, the stream processor
passes this view over a changelog-backed table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

StateT = TypeVar("StateT")


class CodecTable(MutableMapping[str, StateT], Generic[StateT]):
    def __init__(
        self,
        table: MutableMapping[str, dict[str, Any]],
        decode: Callable[[dict[str, Any]], StateT],
        encode: Callable[[StateT], dict[str, Any]],
    ) -> None:
        self._table = table
        self._decode = decode
        self._encode = encode

    def __getitem__(self, key: str) -> StateT:
        return self._decode(self._table[key])

    def get(self, key: str, default: Any = None) -> Any:
        raw: dict[str, Any] | None = self._table.get(key)
        return default if raw is None else self._decode(raw)

    def __setitem__(self, key: str, value: StateT) -> None:
        # faust keeps the dict in memory and JSON-encodes it into the changelog; a restore
        # decodes the changelog back into the same dict.
        self._table[key] = self._encode(value)

    def __delitem__(self, key: str) -> None:
        del self._table[key]

    def pop(self, key: str, default: Any = None) -> Any:
        if key in self._table:
            value = self[key]
            del self._table[key]
            return value
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)
