"""Resolve the Apache Kafka broker jars from Maven Central into a cache outside the repository.

Maven resolves them where `mvn` is on PATH; elsewhere the checked-in lock
(`deploy/kafka-jars.lock.json`, written from a Maven resolution by `python -m deploy.kafka_jars
lock`) names exactly the same jars with their SHA-256, fetched without Maven (`deploy.kafka_lock`).
The `kafka_2.13` POM carries no SLF4J binding (the broker would log nothing), so we add
slf4j-reload4j + reload4j and check that lib/ ends up with exactly one binding and no logback.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path

from deploy.cache import cache_root
from deploy.kafka_lock import (
    LOCK_FILE,
    LockError,
    fetch_locked,
    jar_from_repository_path,
    read_lock,
    repository_url,
    sha256_of,
    write_lock,
)

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.2"
SCALA_VERSION = "2.13"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION),
    ("org.slf4j", "slf4j-reload4j", "1.7.36"),
    ("ch.qos.reload4j", "reload4j", "1.2.25"),
)
_COMPLETE_MARKER = ".complete"
# An SLF4J 1.x binding ships StaticLoggerBinder; a 2.x provider registers a service.
_BINDING_ENTRIES = (
    "org/slf4j/impl/StaticLoggerBinder.class",
    "META-INF/services/org.slf4j.spi.SLF4JServiceProvider",
)


LOCK_COMMAND = "python -m deploy.kafka_jars lock"


class JarResolutionError(RuntimeError):
    """The broker jars could not be resolved (Maven or the lock), or the result is unusable."""


def default_kafka_cache() -> Path:
    """Jar cache: env GPUFAILOVER_KAFKA_CACHE, else $GPUFAILOVER_CACHE_DIR/kafka-<version>
    (default ~/.cache/gpufailover/kafka-<version>)."""
    explicit = os.environ.get("GPUFAILOVER_KAFKA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return cache_root() / f"kafka-{KAFKA_VERSION}"


def render_pom() -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in ARTIFACTS
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>gpufailover.local</groupId>
  <artifactId>kafka-broker-runtime</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def slf4j_bindings(jars: Iterable[Path]) -> list[str]:
    """Names of the jars that carry an SLF4J binding (1.x binder or 2.x provider)."""
    found: list[str] = []
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise JarResolutionError(f"{jar} is not a valid jar: {exc}") from exc
        if any(entry in names for entry in _BINDING_ENTRIES):
            found.append(jar.name)
    return sorted(found)


def check_lib(lib: Path) -> None:
    """Raise unless lib/ holds the broker, exactly one SLF4J binding and no logback."""
    jars = sorted(lib.glob("*.jar"))
    if not any(j.name == f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar" for j in jars):
        raise JarResolutionError(f"{lib} has no kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar")
    logback = [j.name for j in jars if j.name.startswith("logback-")]
    if logback:
        raise JarResolutionError(f"{lib} must not contain logback: {logback}")
    bindings = slf4j_bindings(jars)
    if len(bindings) != 1:
        raise JarResolutionError(f"{lib} needs exactly one SLF4J binding, found {bindings}")


def resolve_jars(cache_dir: Path | None = None) -> Path:
    """Return a directory of broker jars (`-cp 'lib/*'`), resolving them if needed: with Maven
    where `mvn` is on PATH, else from the checked-in lock.

    Concurrent callers are serialized with a lock file; a half-finished resolution never
    becomes visible (jars go to a temporary directory that is renamed at the end).
    """
    cache = cache_dir or default_kafka_cache()
    cache.mkdir(parents=True, exist_ok=True)
    lib = cache / "lib"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (lib / _COMPLETE_MARKER).exists():
            check_lib(lib)
            log.debug("using cached Kafka jars in %s", lib)
            return lib
        if shutil.which("mvn") is not None:
            _run_maven(cache, lib)
        else:
            _fetch_from_lock(cache, lib)
        check_lib(lib)
        (lib / _COMPLETE_MARKER).touch()
    return lib


def _fetch_from_lock(cache: Path, lib: Path) -> None:
    """No Maven here: fetch the locked jars, every SHA-256 checked, staged then renamed."""
    log.info("`mvn` not on PATH: fetching the Kafka jars listed in %s", LOCK_FILE)
    staging = cache / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(lib, ignore_errors=True)
    staging.mkdir()
    started = time.monotonic()
    try:
        jars = read_lock(LOCK_FILE, KAFKA_VERSION)
        fetch_locked(jars, staging, repository_url())
    except LockError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise JarResolutionError(f"{exc} (or install Maven 3.8+, which is tried first)") from exc
    staging.rename(lib)
    log.info("fetched %d jars in %.1f s", len(jars), time.monotonic() - started)


def _maven(cache: Path, out_dir: Path, *extra: str) -> None:
    """copy-dependencies of the broker's POM into `out_dir` (raises with Maven's output)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError("`mvn` not found on PATH: install Maven 3.8+")
    (cache / "pom.xml").write_text(render_pom(), encoding="utf-8")
    cmd = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out_dir}",
        *extra,
    ]
    proc = subprocess.run(
        cmd, cwd=cache, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise JarResolutionError(
            f"Maven failed (exit {proc.returncode}) running {' '.join(cmd)} in {cache}:\n{output}"
        )


def _run_maven(cache: Path, lib: Path) -> None:
    staging = cache / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(lib, ignore_errors=True)
    log.info(
        "resolving Apache Kafka %s jars with Maven into %s (a first run fetches ~70 MB)...",
        KAFKA_VERSION,
        lib,
    )
    started = time.monotonic()
    _maven(cache, staging)
    staging.rename(lib)
    count = len(list(lib.glob("*.jar")))
    log.info("resolved %d jars in %.1f s", count, time.monotonic() - started)


def maven_lock_entries() -> list[tuple[Path, str, int]]:
    """(repository-layout path, sha256, size) of every jar Maven resolves for the broker."""
    with tempfile.TemporaryDirectory(prefix="gpufailover-lock-") as tmp:
        out = Path(tmp) / "repo"
        _maven(Path(tmp), out, "-Dmdep.useRepositoryLayout=true")
        return [
            (jar.relative_to(out), sha256_of(jar), jar.stat().st_size)
            for jar in sorted(out.rglob("*.jar"))
        ]


def lock_command(check: bool) -> int:
    """Write (or with `check`, compare with) the lock from what Maven resolves today."""
    try:
        jars = [jar_from_repository_path(*entry) for entry in maven_lock_entries()]
    except (JarResolutionError, LockError) as exc:
        print(f"{LOCK_COMMAND}: {exc}", file=sys.stderr)
        return 1
    if not check:
        write_lock(LOCK_FILE, KAFKA_VERSION, jars, LOCK_COMMAND)
        print(f"wrote {len(jars)} jars ({sum(j.size for j in jars) / 1e6:.0f} MB) to {LOCK_FILE}")
        return 0
    try:
        locked = set(read_lock(LOCK_FILE, KAFKA_VERSION))
    except LockError as exc:
        print(f"{LOCK_COMMAND} --check: {exc}", file=sys.stderr)
        return 1
    resolved = set(jars)
    if locked == resolved:
        print(f"{LOCK_FILE.name}: the {len(jars)} jars Maven resolves, hashes equal")
        return 0
    for jar in sorted(resolved - locked, key=lambda j: j.file_name):
        print(f"  Maven resolves, not locked: {jar.coordinates} {jar.sha256}", file=sys.stderr)
    for jar in sorted(locked - resolved, key=lambda j: j.file_name):
        print(f"  locked, Maven does not resolve: {jar.coordinates} {jar.sha256}", file=sys.stderr)
    print(
        f"{LOCK_FILE.name} differs from Maven's resolution: run `{LOCK_COMMAND}`", file=sys.stderr
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.kafka_jars",
        description="resolve: the broker jars into the cache (Maven, else the lock); "
        f"lock: write {LOCK_FILE.name} from a Maven resolution (--check: compare instead)",
    )
    parser.add_argument("action", choices=("resolve", "lock"))
    parser.add_argument("--check", action="store_true", help="lock: exit 1 if it differs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.action == "lock":
        return lock_command(args.check)
    try:
        print(resolve_jars())
    except JarResolutionError as exc:
        print(f"python -m deploy.kafka_jars resolve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
