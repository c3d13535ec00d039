"""The one error every decoder raises: it names the field and says what is wrong."""

from __future__ import annotations


class SchemaError(ValueError):
    """A record does not match its topic's schema."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
