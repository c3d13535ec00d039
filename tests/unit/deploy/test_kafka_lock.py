"""The jar lock: the shipped lock's content, and fetching it from a repository (a local folder in
the standard Maven layout, `file://`, so no network) with every hash checked."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from deploy import kafka_jars
from deploy.kafka_jars import ARTIFACTS, KAFKA_VERSION, JarResolutionError, resolve_jars
from deploy.kafka_lock import (
    LOCK_FILE,
    LockedJar,
    LockError,
    fetch_locked,
    jar_from_repository_path,
    read_lock,
    write_lock,
)


def jar_bytes(*entries: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for entry in entries or ("META-INF/MANIFEST.MF",):
            zf.writestr(entry, "")
    return buf.getvalue()


def publish(repo: Path, group: str, artifact: str, version: str, data: bytes) -> LockedJar:
    """Put a jar in `repo` at its Maven layout path; its lock entry."""
    jar = LockedJar(group, artifact, version, hashlib.sha256(data).hexdigest(), len(data))
    path = repo.joinpath(*group.split("."), artifact, version, jar.file_name)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return jar


def broker_repo(repo: Path) -> list[LockedJar]:
    """A repository holding a minimal broker lib: the broker, slf4j-api, one binding."""
    return [
        publish(repo, "org.apache.kafka", "kafka_2.13", KAFKA_VERSION, jar_bytes()),
        publish(
            repo, "org.slf4j", "slf4j-api", "1.7.36", jar_bytes("org/slf4j/LoggerFactory.class")
        ),
        publish(
            repo,
            "org.slf4j",
            "slf4j-reload4j",
            "1.7.36",
            jar_bytes("org/slf4j/impl/StaticLoggerBinder.class"),
        ),
    ]


def test_shipped_lock_is_the_broker_with_one_logging_binding() -> None:
    jars = read_lock(LOCK_FILE, KAFKA_VERSION)
    coords = {(j.group, j.artifact, j.version) for j in jars}
    assert set(ARTIFACTS) <= coords  # what the POM asks for, resolved
    assert len({j.file_name for j in jars}) == len(jars)  # one folder, no name clashes
    assert all(len(j.sha256) == 64 and j.size > 0 for j in jars)
    assert not any(j.artifact.startswith("logback") for j in jars)
    assert sum(j.artifact.startswith("slf4j-") and j.artifact != "slf4j-api" for j in jars) == 1


def test_lock_round_trips(tmp_path: Path) -> None:
    jars = [LockedJar("io.netty", "netty-x", "4.1.105.Final", "ab" * 32, 10, "linux-x86_64")]
    write_lock(tmp_path / "lock.json", KAFKA_VERSION, jars, "how")
    assert read_lock(tmp_path / "lock.json", KAFKA_VERSION) == jars


def test_lock_of_another_kafka_version_is_refused(tmp_path: Path) -> None:
    write_lock(tmp_path / "lock.json", "3.0.0", [LockedJar("g", "a", "1", "00" * 32, 1)], "how")
    with pytest.raises(LockError, match=r"locks Kafka 3\.0\.0"):
        read_lock(tmp_path / "lock.json", KAFKA_VERSION)


def test_repository_path_gives_coordinates_and_classifier() -> None:
    rel = Path("io/netty/netty-transport-native-epoll/4.1.105.Final/"
               "netty-transport-native-epoll-4.1.105.Final-linux-x86_64.jar")  # fmt: skip
    jar = jar_from_repository_path(rel, "00" * 32, 5)
    assert jar.coordinates == "io.netty:netty-transport-native-epoll:4.1.105.Final:linux-x86_64"
    assert jar.url("https://repo.example/maven2/") == f"https://repo.example/maven2/{rel}"


def test_fetch_verifies_and_writes_every_jar(tmp_path: Path) -> None:
    jars = broker_repo(tmp_path / "repo")
    dest = tmp_path / "lib"
    dest.mkdir()
    fetch_locked(jars, dest, (tmp_path / "repo").as_uri())
    assert sorted(p.name for p in dest.iterdir()) == sorted(j.file_name for j in jars)


def test_fetch_refuses_a_jar_whose_hash_differs(tmp_path: Path) -> None:
    jars = broker_repo(tmp_path / "repo")
    tampered = tmp_path.joinpath(
        "repo", "org", "slf4j", "slf4j-api", "1.7.36", "slf4j-api-1.7.36.jar"
    )
    tampered.write_bytes(tampered.read_bytes()[:-1] + b"!")  # same size, other bytes
    dest = tmp_path / "lib"
    dest.mkdir()
    with pytest.raises(LockError, match=r"slf4j-api-1\.7\.36\.jar .* does not match the lock"):
        fetch_locked(jars, dest, (tmp_path / "repo").as_uri())
    assert not (dest / "slf4j-api-1.7.36.jar").exists()
    assert not list(dest.glob("*.part"))


def test_fetch_names_a_jar_missing_from_the_repository(tmp_path: Path) -> None:
    jars = broker_repo(tmp_path / "repo")
    missing = LockedJar("org.example", "gone", "1.0", "00" * 32, 1)
    dest = tmp_path / "lib"
    dest.mkdir()
    with pytest.raises(LockError, match=r"cannot fetch org\.example:gone:1\.0 from file:"):
        fetch_locked([*jars, missing], dest, (tmp_path / "repo").as_uri())


def test_fetch_refuses_other_url_schemes(tmp_path: Path) -> None:
    jar = LockedJar("g", "a", "1", "00" * 32, 1)
    with pytest.raises(LockError, match="scheme"):
        fetch_locked([jar], tmp_path, "ftp://repo.example/maven2")


@pytest.fixture
def no_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH without `mvn`; the lock and repository of a minimal broker lib; its folder."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    jars = broker_repo(tmp_path / "repo")
    write_lock(tmp_path / "lock.json", KAFKA_VERSION, jars, "test")
    monkeypatch.setattr(kafka_jars, "LOCK_FILE", tmp_path / "lock.json")
    monkeypatch.setenv("GPUFAILOVER_MAVEN_REPOSITORY", (tmp_path / "repo").as_uri())
    return tmp_path


def test_without_maven_the_lock_fills_the_cache(no_maven: Path) -> None:
    lib = resolve_jars(no_maven / "cache")
    assert (lib / ".complete").exists()
    assert (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    assert not (no_maven / "cache" / "lib.partial").exists()


def test_without_maven_a_bad_hash_leaves_nothing_in_the_cache(no_maven: Path) -> None:
    broker = no_maven.joinpath(
        "repo",
        "org",
        "apache",
        "kafka",
        "kafka_2.13",
        KAFKA_VERSION,
        f"kafka_2.13-{KAFKA_VERSION}.jar",
    )
    broker.write_bytes(broker.read_bytes() + b"extra")
    with pytest.raises(JarResolutionError, match="does not match the lock"):
        resolve_jars(no_maven / "cache")
    assert sorted(p.name for p in (no_maven / "cache").iterdir()) == [".lock"]


def test_without_maven_or_lock_says_what_to_install(
    no_maven: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_jars, "LOCK_FILE", no_maven / "absent.json")
    with pytest.raises(JarResolutionError, match=r"no jar lock .* install Maven"):
        resolve_jars(no_maven / "cache")
