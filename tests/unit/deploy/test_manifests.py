"""The shipped deployment files run the classifier scaled out and the consumers as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_kustomization_lists_every_manifest_in_the_folder() -> None:
    listed = set(_load(DEPLOY / "k8s" / "kustomization.yaml")["resources"])
    present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_k8s_runs_several_classifier_workers_and_one_consumers_pod() -> None:
    classifier = _load(DEPLOY / "k8s" / "classifier-deployment.yaml")
    consumers = _load(DEPLOY / "k8s" / "consumers-deployment.yaml")
    assert classifier["spec"]["replicas"] > 1
    (container,) = classifier["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["run", "--only", "classifier"]
    assert consumers["spec"]["replicas"] == 1  # one breaker for the fleet
    assert consumers["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = consumers["spec"]["template"]["spec"]["containers"]
    assert container["args"][2] == "quarantine,requeue,job-status"


def test_compose_runs_several_classifier_workers_and_scrapes_each() -> None:
    services = _load(DEPLOY / "compose.yaml")["services"]
    assert services["classifier"]["deploy"]["replicas"] > 1
    assert "ports" not in services["classifier"]  # replicas cannot share a host port
    scrape = _load(DEPLOY / "prometheus" / "prometheus.yml")["scrape_configs"]
    (job,) = [j for j in scrape if j["job_name"] == "gpufailover-classifier"]
    assert job["dns_sd_configs"][0]["names"] == ["classifier"]
