"""Slurm hostlist expressions: `gpu-[01-04,07],login1` -> gpu-01 ... gpu-04, gpu-07, login1.

Supported: comma-separated items (commas inside brackets belong to the range), any number of
bracket groups per item (`r[1-2]n[1-2]` is a cartesian product, in Slurm's order), ranges keep
the zero padding of their lower bound (`[08-10]` -> 08, 09, 10), duplicates are dropped.
"""

from __future__ import annotations

import itertools

MAX_HOSTS = 65_536  # a bigger expansion is a typo, not a cluster


class HostlistError(ValueError):
    """The expression is not a valid Slurm hostlist."""


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """Expand `expr` into host names, in order, without duplicates."""
    seen: dict[str, None] = {}
    for item in _split_top_level(expr):
        for host in _expand_item(item):
            seen.setdefault(host, None)
            if len(seen) > MAX_HOSTS:
                raise HostlistError(f"{expr!r} expands to more than {MAX_HOSTS} hosts")
    if not seen:
        raise HostlistError("empty host list")
    return tuple(seen)


def _split_top_level(expr: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expr.strip():
        if ch == "[":
            if depth:
                raise HostlistError(f"{expr!r}: nested '['")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"{expr!r}: ']' without '['")
            depth = 0
        elif ch == "," and not depth:
            items.append("".join(current).strip())
            current = []
            continue
        elif ch.isspace() and not depth:
            raise HostlistError(f"{expr!r}: whitespace inside a host name")
        current.append(ch)
    if depth:
        raise HostlistError(f"{expr!r}: unclosed '['")
    items.append("".join(current).strip())
    if any(not item for item in items):
        raise HostlistError(f"{expr!r}: empty item between commas")
    return items


def _expand_item(item: str) -> list[str]:
    # Split into literal parts and bracket bodies: "a[1-2]b[3]" -> ["a", "1-2", "b", "3", ""].
    parts: list[list[str]] = []
    rest = item
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, _, rest = tail.partition("]")
        parts.append([head])
        parts.append(_expand_ranges(item, body))
    parts.append([rest])
    return ["".join(combo) for combo in itertools.product(*parts)]


def _expand_ranges(item: str, body: str) -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        if not piece:
            raise HostlistError(f"{item!r}: empty range")
        lo, sep, hi = piece.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"{item!r}: {piece!r} is not a number or a range a-b")
        if not sep:
            out.append(lo)
            continue
        start, end = int(lo), int(hi)
        if end < start:
            raise HostlistError(f"{item!r}: range {piece!r} runs backwards")
        if end - start >= MAX_HOSTS:
            raise HostlistError(f"{item!r}: range {piece!r} is too large")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(start, end + 1))
    return out
