"""pytest plugin for mutation runs only: mutmut 3.7 reads `item._nodeid`, gone in pytest 9.

mutmut 3.8 reads `item.nodeid`, but it needs click>=8.4.2 and faust-streaming pins click<8.4;
so we pin 3.7.0 and give its stats collector the attribute it expects.
"""

from __future__ import annotations

from typing import Any


def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:
        if not hasattr(item, "_nodeid"):
            item._nodeid = item.nodeid
