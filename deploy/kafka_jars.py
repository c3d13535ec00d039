"""Resolve the Apache Kafka broker jars from Maven Central into a cache outside the repository.

The `kafka_2.13` POM carries no SLF4J binding (the broker would log nothing), so we add
slf4j-reload4j + reload4j and check that lib/ ends up with exactly one binding and no logback.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path

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


class JarResolutionError(RuntimeError):
    """Maven could not resolve the broker jars, or the result is unusable."""


def default_kafka_cache() -> Path:
    """Jar cache: env GPUFAILOVER_KAFKA_CACHE, else ~/.cache/gpufailover/kafka-<version>."""
    explicit = os.environ.get("GPUFAILOVER_KAFKA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return Path.home() / ".cache" / "gpufailover" / f"kafka-{KAFKA_VERSION}"


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
    """Return a directory of broker jars (`-cp 'lib/*'`), resolving them with Maven if needed.

    Concurrent callers are serialized with a lock file; a half-finished resolution never
    becomes visible (Maven writes to a temporary directory that is renamed at the end).
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
        _run_maven(cache, lib)
        check_lib(lib)
        (lib / _COMPLETE_MARKER).touch()
    return lib


def _run_maven(cache: Path, lib: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError("`mvn` not found on PATH: install Maven 3.8+ to fetch Kafka jars")
    (cache / "pom.xml").write_text(render_pom(), encoding="utf-8")
    staging = cache / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(lib, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    log.info(
        "resolving Apache Kafka %s jars with Maven into %s (first run downloads ~40 MB)...",
        KAFKA_VERSION,
        lib,
    )
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=cache, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise JarResolutionError(
            f"Maven failed (exit {proc.returncode}) running {' '.join(cmd)} in {cache}:\n{output}"
        )
    staging.rename(lib)
    count = len(list(lib.glob("*.jar")))
    log.info("resolved %d jars in %.1f s", count, time.monotonic() - started)
