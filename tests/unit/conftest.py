"""Unit tests see the default event-time bounds, whatever the shell or an earlier test package
set (tests/integration turns them off for its fixed-date fixtures)."""

from __future__ import annotations

import pytest

from schemas.event_time import BOUNDS_OFF_ENV


@pytest.fixture(autouse=True)
def default_event_time_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BOUNDS_OFF_ENV:
        monkeypatch.delenv(name, raising=False)
