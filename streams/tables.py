"""A typed view over a faust table whose values are orjson bytes.

The engine works on `MutableMapping[str, State]`; replay passes a dict, the stream processor
passes this view over a changelog-backed table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

import orjson

StateT = TypeVar("StateT")


class CodecTable(MutableMapping[str, StateT], Generic[StateT]):
    def __init__(
        self,
        table: MutableMapping[str, bytes],
        decode: Callable[[dict[str, Any]], StateT],
        encode: Callable[[StateT], dict[str, Any]],
    ) -> None:
        self._table = table
        self._decode = decode
        self._encode = encode

    def __getitem__(self, key: str) -> StateT:
        return self._decode(orjson.loads(self._table[key]))

    def get(self, key: str, default: Any = None) -> Any:
        raw = self._table.get(key)
        return default if raw is None else self._decode(orjson.loads(raw))

    def __setitem__(self, key: str, value: StateT) -> None:
        self._table[key] = orjson.dumps(self._encode(value))

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
