"""Slurm's one-line text output, read the same way by the actuator, the local cluster and the
Slurm demo."""

from __future__ import annotations

import re

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_fields(line: str) -> dict[str, str]:
    """One record of `scontrol -o show ...` (`Key=Value Key=Value`) as a dict. A value may hold
    spaces (Reason=, Comment=): it runs up to the next ` Key=`; a repeated key keeps its first
    value."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out
