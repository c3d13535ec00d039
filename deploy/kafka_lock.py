"""The broker jars without Maven: a checked-in lock of exactly the jars Maven resolves
(coordinates, size, SHA-256), fetched from a Maven repository's standard layout and verified.

`python -m deploy.kafka_jars lock` writes the lock from a Maven resolution; `resolve_jars`
uses it only where `mvn` is absent. Every jar is downloaded to `<name>.part` while it is
hashed and renamed only when its size and SHA-256 match; the caller stages the whole folder
and renames it when every jar is in, so a failed fetch leaves nothing in the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

LOCK_FILE = Path(__file__).with_name("kafka-jars.lock.json")
REPOSITORY_ENV = "GPUFAILOVER_MAVEN_REPOSITORY"
DEFAULT_REPOSITORY = "https://repo.maven.apache.org/maven2"
FETCH_TIMEOUT_S = 60.0
FETCH_WORKERS = 4  # a few jars at once: ~57 small requests, latency-bound
_SCHEMES = ("https", "http", "file")  # http: a mirror inside a network; every hash is checked


class LockError(RuntimeError):
    """The lock is missing or unreadable, or a jar could not be fetched or failed its check."""


@dataclass(frozen=True)
class LockedJar:
    group: str
    artifact: str
    version: str
    sha256: str
    size: int
    classifier: str = ""

    @property
    def file_name(self) -> str:
        """The name Maven's copy-dependencies gives it (and the repository's file name)."""
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    @property
    def coordinates(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"

    def url(self, repository: str) -> str:
        path = "/".join([*self.group.split("."), self.artifact, self.version, self.file_name])
        return f"{repository.rstrip('/')}/{path}"


def repository_url() -> str:
    """`$GPUFAILOVER_MAVEN_REPOSITORY` (a mirror), else Maven Central."""
    return os.environ.get(REPOSITORY_ENV) or DEFAULT_REPOSITORY


def jar_from_repository_path(rel: Path, sha256: str, size: int) -> LockedJar:
    """A jar's lock entry from its path in the standard layout: group/dirs/artifact/version/file."""
    parts = rel.parts
    if len(parts) < 4:
        raise LockError(f"{rel} is not a path in a Maven repository layout")
    artifact, version, name = parts[-3], parts[-2], parts[-1]
    stem = f"{artifact}-{version}"
    if not (name.startswith(stem) and name.endswith(".jar")):
        raise LockError(f"{rel}: file name does not match {artifact} {version}")
    classifier = name[len(stem) : -len(".jar")].removeprefix("-")
    return LockedJar(".".join(parts[:-3]), artifact, version, sha256, size, classifier)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_lock(path: Path, kafka_version: str, jars: Iterable[LockedJar], how: str) -> None:
    entries = sorted(jars, key=lambda j: j.file_name)
    doc = {
        "comment": f"Jars of the Kafka {kafka_version} broker as Maven resolves them. "
        f"Regenerate with `{how}`.",
        "kafka_version": kafka_version,
        "jars": [{k: v for k, v in asdict(j).items() if v != ""} for j in entries],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def read_lock(path: Path, kafka_version: str) -> list[LockedJar]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LockError(f"no jar lock at {path}: reinstall gpufailover or install Maven") from exc
    except (OSError, ValueError) as exc:
        raise LockError(f"cannot read the jar lock {path}: {exc}") from exc
    if doc.get("kafka_version") != kafka_version:
        raise LockError(
            f"{path} locks Kafka {doc.get('kafka_version')}, not {kafka_version}: "
            "regenerate it with `python -m deploy.kafka_jars lock`"
        )
    try:
        jars = [LockedJar(**entry) for entry in doc["jars"]]
    except (KeyError, TypeError) as exc:
        raise LockError(f"{path}: malformed entry ({exc})") from exc
    if not jars:
        raise LockError(f"{path} lists no jars")
    return jars


Opener = Callable[[str, float], IO[bytes]]


def _open(url: str, timeout: float) -> IO[bytes]:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise LockError(f"refusing to fetch {url}: scheme must be one of {_SCHEMES}")
    response: Any = urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 - scheme checked
    return response  # type: ignore[no-any-return]


def fetch_jar(jar: LockedJar, dest: Path, repository: str, opener: Opener = _open) -> None:
    """Download one jar into `dest/` verifying size and SHA-256; nothing is left on failure."""
    url = jar.url(repository)
    part = dest / f"{jar.file_name}.part"
    digest = hashlib.sha256()
    size = 0
    try:
        with opener(url, FETCH_TIMEOUT_S) as response, part.open("wb") as out:
            for chunk in iter(lambda: response.read(1 << 16), b""):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except (OSError, urllib.error.URLError) as exc:  # HTTPError (404...) is a URLError
        part.unlink(missing_ok=True)
        raise LockError(f"cannot fetch {jar.coordinates} from {url}: {exc}") from exc
    if size != jar.size or digest.hexdigest() != jar.sha256:
        part.unlink(missing_ok=True)
        raise LockError(
            f"{jar.file_name} from {url} does not match the lock: sha256 {digest.hexdigest()} "
            f"({size} bytes), expected {jar.sha256} ({jar.size} bytes); nothing was cached"
        )
    part.rename(dest / jar.file_name)


def fetch_locked(
    jars: list[LockedJar], dest: Path, repository: str, opener: Opener = _open
) -> None:
    """Fetch every jar of the lock into `dest/` (which the caller stages and discards on error)."""
    total = sum(j.size for j in jars)
    log.info(
        "fetching %d Kafka jars (%.0f MB) from %s, SHA-256 checked against %s",
        len(jars), total / 1e6, repository, LOCK_FILE.name,
    )  # fmt: skip
    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        # list(): wait for all and raise the first failure.
        list(pool.map(lambda j: fetch_jar(j, dest, repository, opener), jars))
