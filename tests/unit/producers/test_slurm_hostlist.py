"""Slurm hostlist expressions."""

from __future__ import annotations

import pytest

from producers.hostlist import HostlistError, expand_hostlist


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("gpu-01", ("gpu-01",)),
        ("a,b,c", ("a", "b", "c")),
        ("gpu-[01-04]", ("gpu-01", "gpu-02", "gpu-03", "gpu-04")),
        ("gpu-[01-02,07]", ("gpu-01", "gpu-02", "gpu-07")),
        ("gpu-[8-10]", ("gpu-8", "gpu-9", "gpu-10")),
        ("gpu-[08-10]", ("gpu-08", "gpu-09", "gpu-10")),
        ("gpu-[001-002],login1", ("gpu-001", "gpu-002", "login1")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("n[1-2].example.org", ("n1.example.org", "n2.example.org")),
        ("n[1-3],n2", ("n1", "n2", "n3")),  # duplicates dropped, order kept
        ("  gpu-[1-2]  ", ("gpu-1", "gpu-2")),
        ("node[7]", ("node7",)),
    ],
)
def test_expansion(expr: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty"),
        ("a,,b", "empty item"),
        ("gpu-[01-04", "unclosed"),
        ("gpu-01-04]", "without"),
        ("gpu-[[1-2]]", "nested"),
        ("gpu-[4-1]", "backwards"),
        ("gpu-[a-b]", "not a number"),
        ("gpu-[]", "empty range"),
        ("gpu-[1-]", "not a number"),
        ("gpu 01", "whitespace"),
        ("n[0-99999999]", "too large"),
        ("a[0-999]b[0-999]", "more than"),
    ],
)
def test_invalid_expressions(expr: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message):
        expand_hostlist(expr)
