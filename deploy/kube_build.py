"""Build kube-apiserver, kube-controller-manager and kube-scheduler once, into a user cache.

`k8s.io/kubernetes` is served by the Go module proxy, but its go.mod points its `k8s.io/*`
staging modules at local folders; a small consuming module replaces each of them with the
published `v0.<minor>.<patch>` and builds the three commands (docs/kubernetes.md, "Testing").
A fresh build takes about 5-6 minutes on 2 cores (Go's build cache makes a rebuild fast); the
binaries land in `<cache>/bin`, written to `bin.partial` and renamed when complete, under a
lock, so concurrent callers build once and never see half a build.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from deploy.cache import cache_root

log = logging.getLogger(__name__)

KUBE_VERSION = "v1.34.4"
STAGING_VERSION = "v0." + KUBE_VERSION.split(".", 1)[1]  # k8s.io/api etc. for that release
COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
GO_FALLBACK = Path("/usr/local/go/bin/go")  # the Go tarball's place, not on PATH by default
_COMPLETE_MARKER = ".complete"


class KubeBuildError(RuntimeError):
    """The Kubernetes binaries could not be built."""


def default_kube_cache() -> Path:
    """Build cache: env GPUFAILOVER_KUBE_CACHE, else $GPUFAILOVER_CACHE_DIR/kube-<version>
    (default ~/.cache/gpufailover/kube-<version>)."""
    explicit = os.environ.get("GPUFAILOVER_KUBE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return cache_root() / f"kube-{KUBE_VERSION}"


def find_go() -> str:
    """The `go` command: env GPUFAILOVER_GO, else PATH, else /usr/local/go/bin/go."""
    explicit = os.environ.get("GPUFAILOVER_GO")
    found = explicit or shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if found is None:
        raise KubeBuildError(
            "Go not found (PATH, /usr/local/go/bin/go or GPUFAILOVER_GO): it is needed once to "
            f"build kube-apiserver {KUBE_VERSION} for the Kubernetes tests"
        )
    return found


def cached_binaries(cache_dir: Path | None = None) -> Path | None:
    """The folder of built binaries if a complete build is cached, else None."""
    bin_dir = (cache_dir or default_kube_cache()) / "bin"
    return bin_dir if (bin_dir / _COMPLETE_MARKER).exists() else None


def ensure_binaries(cache_dir: Path | None = None) -> Path:
    """The folder holding the three binaries, building them first if they are not cached."""
    cache = cache_dir or default_kube_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = cached_binaries(cache)
        if ready is not None:
            log.debug("using cached Kubernetes binaries in %s", ready)
            return ready
        _build(cache, find_go())
    return cache / "bin"


def staging_replaces(kubernetes_go_mod: str) -> list[str]:
    """The modules that k8s.io/kubernetes's go.mod replaces with `./staging/...` folders."""
    return sorted(
        set(re.findall(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+\./staging/", kubernetes_go_mod, re.M))
    )


def render_go_mod(replaced: list[str]) -> str:
    lines = ["module localk8s", "", "go 1.24.0", "", f"require k8s.io/kubernetes {KUBE_VERSION}"]
    lines += [f"replace {m} => {m} {STAGING_VERSION}" for m in replaced]
    return "\n".join(lines) + "\n"


def render_tools_go() -> str:
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"' for c in COMMANDS)
    return f"//go:build tools\n\npackage localk8s\n\nimport (\n{imports}\n)\n"


def _go(go: str, build: Path, *args: str) -> str:
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    log.info("kube build: go %s", " ".join(args))
    done = subprocess.run(
        [go, *args], cwd=build, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-4000:]
        raise KubeBuildError(
            f"`go {' '.join(args)}` in {build} exited {done.returncode}:\n{output}"
        )
    return done.stdout


def _build(cache: Path, go: str) -> None:
    build = cache / "build"
    build.mkdir(exist_ok=True)
    log.warning(
        "building Kubernetes %s (%s) into %s: about 5 minutes once, cached afterwards",
        KUBE_VERSION,
        ", ".join(COMMANDS),
        cache,
    )
    info = json.loads(
        _go(go, build, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBE_VERSION}")
    )
    replaced = staging_replaces(Path(info["GoMod"]).read_text(encoding="utf-8"))
    if not replaced:
        raise KubeBuildError(f"no staging modules found in {info['GoMod']}: unexpected go.mod")
    (build / "go.mod").write_text(render_go_mod(replaced), encoding="utf-8")
    (build / "tools.go").write_text(render_tools_go(), encoding="utf-8")
    _go(go, build, "mod", "tidy")
    staging = cache / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    _go(go, build, "build", "-o", f"{staging}/", *(f"k8s.io/kubernetes/cmd/{c}" for c in COMMANDS))
    missing = [c for c in COMMANDS if not (staging / c).exists()]
    if missing:
        raise KubeBuildError(f"go build left no {', '.join(missing)} in {staging}")
    (staging / _COMPLETE_MARKER).touch()
    shutil.rmtree(cache / "bin", ignore_errors=True)
    staging.rename(cache / "bin")
    log.warning("built Kubernetes %s into %s", KUBE_VERSION, cache / "bin")
