"""Metric names in PromQL (the dashboard's and the alert rules'), and the names a component emits.

No PromQL parser ships for Python, and PromQL's metric names are easy to find once the parts
that are not names are cut out: strings, label matchers `{...}`, ranges `[...]`, grouping
clauses `by (...)`, Grafana variables, then every identifier not followed by `(` (a function)
and not a keyword is a metric name. `test_metric_names_are_found_in_promql_shapes` pins that on
every shape the project's queries use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "gpufailover.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
# Series Prometheus itself adds to every target: not emitted by a component.
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
     "unless", "offset", "inf", "nan", "atan2"}
)  # fmt: skip
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"\{[^{}]*\}", "", s)
    s = re.sub(r"\[[^\[\]]*\]", "", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", "", s)
    s = re.sub(r"\$\w+", "", s)
    names = set()
    for m in _IDENT.finditer(s):
        if s[m.end() :].lstrip().startswith("("):
            continue  # a function call (or an aggregation)
        if m.group(0).lower() not in _KEYWORDS:
            names.add(m.group(0))
    return names


def dashboard_exprs(path: Path = DASHBOARD) -> list[str]:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                yield node["expr"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return list(walk(json.loads(path.read_text())))


def alert_exprs(path: Path = ALERTS) -> list[str]:
    doc = yaml.safe_load(path.read_text())
    return [str(rule["expr"]) for group in doc["groups"] for rule in group["rules"]]


def queried(exprs: Iterable[str]) -> set[str]:
    return {name for expr in exprs for name in metric_names(expr)}


def series_names(exposition: str) -> set[str]:
    """Every series name an exposition declares, counters' `_total` and histograms' `_bucket`,
    `_sum`, `_count` included (whether or not a labelled family has a child yet)."""
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def samples(exposition: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(name, labels) -> value of every sample in an exposition."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }
