"""The wheel's package data and Prometheus's file discovery name files that exist."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def test_every_package_data_pattern_matches_a_file() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    for package, patterns in package_data.items():
        for pattern in patterns:
            found = [p for p in (REPO / package).glob(pattern) if p.is_file()]
            assert found, f"{package}: {pattern!r} matches no file"


def test_prometheus_file_discovery_globs_match_a_shipped_file() -> None:
    prometheus = REPO / "deploy" / "prometheus"
    config = yaml.safe_load((prometheus / "prometheus.yml").read_text())
    globs = [
        pattern
        for job in config["scrape_configs"]
        for sd in job.get("file_sd_configs", [])
        for pattern in sd["files"]
    ]
    assert globs
    for pattern in globs:
        files = sorted(prometheus.glob(pattern))
        assert files, f"{pattern!r} matches nothing: promtool warns, Prometheus scrapes no agent"
        for f in files:
            assert isinstance(yaml.safe_load(f.read_text()), list), f  # target groups
