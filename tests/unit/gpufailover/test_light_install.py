"""`pip install gpufailover` (no extras) is enough for the node agent, `publish` and the telemetry
client: their import paths use only the core dependencies of pyproject.toml, and a command that
needs `gpufailover[pipeline]` says so in one line instead of a traceback.

The light install is simulated in a subprocess whose import system refuses every top-level module
that is neither the standard library, this project, nor installed by a core dependency (the
closure of pyproject's `dependencies`, read from the installed distributions' metadata). So an
import of faust, lightkube or any of their dependencies on those paths fails here as on a node.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpufailover import cli
from gpufailover.cli.extras import EXIT_MISSING_EXTRA, hint_for

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT_PACKAGES = frozenset(
    p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
)
# What a GPU node runs: the two commands and the telemetry client (imported by training code).
LIGHT_ENTRY_MODULES = ("gpufailover.cli.agent", "gpufailover.cli.publish", "producers.telemetry")
# Lazy imports on the light paths that only pipeline code reaches, each with why.
PIPELINE_ONLY_IMPORTS = {
    # KafkaSecurity.faust_credentials(): called by the classifier only
    ("gpufailover.security", "faust"),
}


def core_distributions(*extras: str) -> set[str]:
    """pyproject's `dependencies` (and those of `extras`) and everything they install, as the
    installed distributions' metadata says."""
    project = PYPROJECT["project"]
    optional = project["optional-dependencies"]
    wanted = project["dependencies"] + [
        d for e in extras for d in project["optional-dependencies"][e]
    ]
    todo = [(Requirement(d), "") for d in wanted]
    seen: set[str] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name == "gpufailover":  # a self-reference (`gpufailover[local-broker]`): from
            # pyproject, not the installed metadata, which may predate the extra
            todo.extend((Requirement(d), "") for e in req.extras for d in optional[e])
            continue
        if name in seen:
            continue
        seen.add(name)
        for line in importlib.metadata.requires(name) or []:
            todo.extend((Requirement(line), e) for e in ({""} | set(req.extras)))
    return seen


def core_top_level_modules(*extras: str) -> set[str]:
    core = core_distributions(*extras)
    return {
        top
        for top, dists in importlib.metadata.packages_distributions().items()
        if any(canonicalize_name(d) in core for d in dists)
    }


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


class _Imports(ast.NodeVisitor):
    """(module, names) of every import in a tree, in functions too, but not under TYPE_CHECKING."""

    def __init__(self) -> None:
        self.found: list[tuple[str, tuple[str, ...]]] = []

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" not in ast.unparse(node.test):
            self.generic_visit(node)
            return
        for child in node.orelse:  # the typing-only body never runs
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.extend((alias.name, ()) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        assert node.level == 0, "relative imports are not used in this project"
        assert node.module is not None
        self.found.append((node.module, tuple(alias.name for alias in node.names)))


def _imports(tree: ast.AST) -> list[tuple[str, tuple[str, ...]]]:
    visitor = _Imports()
    visitor.visit(tree)
    return visitor.found


def reachable(entries: tuple[str, ...]) -> tuple[set[str], set[tuple[str, str]]]:
    """Project modules reachable from `entries` through any import statement (lazy ones too),
    and the (importing module, third-party top-level module) pairs on the way."""
    modules: set[str] = set()
    third_party: set[tuple[str, str]] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in modules or path is None:
            continue
        modules.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        for target, names in _imports(ast.parse(path.read_text(), str(path))):
            top = target.partition(".")[0]
            if top in PROJECT_PACKAGES:
                todo.append(target)
                todo.extend(f"{target}.{name}" for name in names)  # submodules, when they are
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.add((module, top))
    return modules, third_party


_LIGHT_PRELUDE = """
import importlib.abc, json, os, sys

ALLOWED = set(json.loads(os.environ["LIGHT_ALLOWED"]))

class LightInstall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if top in ALLOWED or top in sys.stdlib_module_names:
            return None  # the ordinary finders locate it
        raise ModuleNotFoundError(f"No module named {name!r} (not in a light install)", name=name)

sys.meta_path.insert(0, LightInstall())
"""


def run_light(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    allowed = sorted(core_top_level_modules() | PROJECT_PACKAGES)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LIGHT_ALLOWED": json.dumps(allowed),
        "GPUFAILOVER_STATE_DIR": str(tmp_path / "state"),  # never near anyone's broker
    }
    return subprocess.run(
        [sys.executable, "-c", _LIGHT_PRELUDE + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_cli_light(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_light(f"from gpufailover.cli import main\nsys.exit(main({argv!r}))", tmp_path)


def test_core_dependencies_exclude_the_pipeline() -> None:
    core = core_distributions()
    assert {"aiokafka", "orjson", "nvidia-ml-py", "prometheus-client"} <= core
    assert not core & {"faust-streaming", "mode-streaming", "lightkube", "httpx2"}


def test_every_import_on_the_light_paths_is_a_core_dependency() -> None:
    modules, third_party = reachable(LIGHT_ENTRY_MODULES)
    assert {"producers.agent", "producers.jobs", "producers.nvml_source"} <= modules
    allowed = core_top_level_modules()
    outside = {(m, top) for m, top in third_party if top not in allowed}
    assert outside == PIPELINE_ONLY_IMPORTS, "imports outside pyproject's core dependencies"
    # Nothing of the classifier: streams' faust app, glue and tables stay off a node.
    assert not {m for m in modules if m.partition(".")[0] == "streams"}


def test_every_command_needs_at_most_the_pipeline_extra() -> None:
    # `pip install '.[pipeline]'` (the Docker image, the README's demo) runs every command:
    # nothing outside the tests may need a [dev] dependency.
    _, third_party = reachable(cli.COMMAND_MODULES)
    allowed = core_top_level_modules("pipeline")
    assert {top for _, top in third_party} - allowed == set()
    assert {"faust", "lightkube"} <= {top for _, top in third_party}  # the walk sees them


def test_the_light_paths_import_without_the_pipeline(tmp_path: Path) -> None:
    modules, _ = reachable(LIGHT_ENTRY_MODULES)
    code = f"""
import importlib
for name in {sorted(modules)!r}:
    importlib.import_module(name)
from producers.telemetry import TelemetryClient
print("imported", len({sorted(modules)!r}))
for blocked in ("faust", "lightkube"):
    try:
        importlib.import_module(blocked)
    except ModuleNotFoundError:
        continue
    raise SystemExit(blocked + " is importable: the light install is not simulated")
"""
    done = run_light(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(modules)}" in done.stdout


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["agent", "--help"], "usage: gpufailover agent"),
        (["publish", "--help"], "usage: gpufailover publish"),
    ],
)
def test_node_commands_run_without_the_pipeline(
    argv: list[str], usage: str, tmp_path: Path
) -> None:
    done = run_cli_light(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage)


@pytest.mark.parametrize("command", ["classifier", "demo", "k8s-events"])
def test_a_pipeline_command_names_the_extra_in_one_line(command: str, tmp_path: Path) -> None:
    done = run_cli_light([command, "--bootstrap", "127.0.0.1:1"], tmp_path)
    assert done.returncode == EXIT_MISSING_EXTRA
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"gpufailover {command}: this command needs the pipeline extra")
    assert lines[0].endswith("pip install 'gpufailover[pipeline]'")
    assert not (tmp_path / "state").exists(), "it started work (a broker) before failing"


def test_a_missing_module_that_is_no_extra_stays_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A genuine bug (an import typo) must not be dressed up as "install the extra".
    assert hint_for(ModuleNotFoundError("No module named 'nosuch'", name="nosuch")) is None

    def broken(_args: object) -> int:
        raise ModuleNotFoundError("No module named 'nosuch'", name="nosuch")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.set_defaults(func=broken)
    with pytest.raises(ModuleNotFoundError, match="nosuch"):
        cli.main([])
