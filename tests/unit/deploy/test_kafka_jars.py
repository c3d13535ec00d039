from __future__ import annotations

import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from deploy import kafka_jars
from deploy.kafka_jars import (
    ARTIFACTS,
    KAFKA_VERSION,
    JarResolutionError,
    check_lib,
    render_pom,
    resolve_jars,
)

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def make_jar(path: Path, *entries: str) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for entry in entries or ("META-INF/MANIFEST.MF",):
            zf.writestr(entry, "")


def make_lib(lib: Path, *bindings: str) -> None:
    lib.mkdir(parents=True)
    make_jar(lib / f"kafka_2.13-{KAFKA_VERSION}.jar")
    make_jar(lib / "slf4j-api-1.7.36.jar", "org/slf4j/LoggerFactory.class")
    for name in bindings:
        make_jar(lib / name, "org/slf4j/impl/StaticLoggerBinder.class")


def test_pom_lists_broker_and_one_logging_binding() -> None:
    root = ET.fromstring(render_pom())
    assert root.findtext("m:packaging", namespaces=NS) == "pom"
    deps = {
        (d.findtext("m:groupId", namespaces=NS), d.findtext("m:artifactId", namespaces=NS)): (
            d.findtext("m:version", namespaces=NS)
        )
        for d in root.iterfind("m:dependencies/m:dependency", NS)
    }
    assert deps == {(g, a): v for g, a, v in ARTIFACTS}
    assert deps[("org.apache.kafka", "kafka_2.13")] == "3.9.2"


def test_check_lib_accepts_exactly_one_binding(tmp_path: Path) -> None:
    make_lib(tmp_path / "lib", "slf4j-reload4j-1.7.36.jar")
    check_lib(tmp_path / "lib")


@pytest.mark.parametrize("bindings", [(), ("slf4j-reload4j-1.7.36.jar", "slf4j-simple-1.7.36.jar")])
def test_check_lib_rejects_zero_or_two_bindings(tmp_path: Path, bindings: tuple[str, ...]) -> None:
    make_lib(tmp_path / "lib", *bindings)
    with pytest.raises(JarResolutionError, match="exactly one SLF4J binding"):
        check_lib(tmp_path / "lib")


def test_check_lib_rejects_logback(tmp_path: Path) -> None:
    make_lib(tmp_path / "lib", "slf4j-reload4j-1.7.36.jar")
    make_jar(tmp_path / "lib" / "logback-core-1.2.13.jar")
    with pytest.raises(JarResolutionError, match="logback"):
        check_lib(tmp_path / "lib")


def test_resolve_jars_reuses_a_complete_cache_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_lib(tmp_path / "lib", "slf4j-reload4j-1.7.36.jar")
    (tmp_path / "lib" / ".complete").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no mvn
    assert resolve_jars(tmp_path) == tmp_path / "lib"


def test_default_cache_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_KAFKA_CACHE", str(tmp_path))
    assert kafka_jars.default_kafka_cache() == tmp_path
    monkeypatch.delenv("GPUFAILOVER_KAFKA_CACHE")
    monkeypatch.setenv("GPUFAILOVER_CACHE_DIR", str(tmp_path / "downloads"))
    assert kafka_jars.default_kafka_cache() == tmp_path / "downloads" / f"kafka-{KAFKA_VERSION}"
    monkeypatch.delenv("GPUFAILOVER_CACHE_DIR")
    assert kafka_jars.default_kafka_cache() == (
        Path.home() / ".cache" / "gpufailover" / f"kafka-{KAFKA_VERSION}"
    )


def test_cache_does_not_follow_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # State is per broker or test run; the jars are fetched once for all of them.
    monkeypatch.delenv("GPUFAILOVER_KAFKA_CACHE", raising=False)
    monkeypatch.delenv("GPUFAILOVER_CACHE_DIR", raising=False)
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path / "state"))
    assert tmp_path not in kafka_jars.default_kafka_cache().parents


def test_maven_errors_are_reported_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mvn"
    fake.write_text(
        "#!/bin/sh\necho '[ERROR] Could not transfer artifact kafka_2.13' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(JarResolutionError) as info:
        resolve_jars(tmp_path / "cache")
    assert "[ERROR] Could not transfer artifact kafka_2.13" in str(info.value)
    assert "exit 1" in str(info.value)
    assert not (tmp_path / "cache" / "lib").exists()
