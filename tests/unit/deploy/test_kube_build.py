"""The consuming go.mod that builds the Kubernetes commands from the module proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy import kube_build

GO_MOD = """module k8s.io/kubernetes

go 1.24.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/x/y v1.2.3
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/x/y => github.com/x/y v1.2.4
)

replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl
"""


def test_staging_replaces_lists_only_the_local_staging_modules() -> None:
    assert kube_build.staging_replaces(GO_MOD) == [
        "k8s.io/api",
        "k8s.io/client-go",
        "k8s.io/kubectl",
    ]


def test_go_mod_pins_every_staging_module_to_the_published_release() -> None:
    text = kube_build.render_go_mod(["k8s.io/api", "k8s.io/client-go"])
    assert f"require k8s.io/kubernetes {kube_build.KUBE_VERSION}" in text
    assert "replace k8s.io/api => k8s.io/api v0.34.4" in text
    assert "replace k8s.io/client-go => k8s.io/client-go v0.34.4" in text


def test_tools_go_imports_the_three_commands() -> None:
    text = kube_build.render_tools_go()
    assert text.startswith("//go:build tools\n")
    for command in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert f'_ "k8s.io/kubernetes/cmd/{command}"' in text


def test_cache_dir_honours_the_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFAILOVER_KUBE_CACHE", str(tmp_path / "k"))
    assert kube_build.default_kube_cache() == tmp_path / "k"
    monkeypatch.delenv("GPUFAILOVER_KUBE_CACHE")
    assert kube_build.default_kube_cache().name == "kube-v1.34.4"


def test_an_incomplete_build_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kube-apiserver").touch()
    assert kube_build.cached_binaries(tmp_path) is None
    (tmp_path / "bin" / ".complete").touch()
    assert kube_build.cached_binaries(tmp_path) == tmp_path / "bin"


def test_missing_go_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUFAILOVER_GO", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(kube_build, "GO_FALLBACK", tmp_path / "no-go")
    with pytest.raises(kube_build.KubeBuildError, match="Go not found"):
        kube_build.find_go()
