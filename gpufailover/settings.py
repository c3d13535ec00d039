"""Settings shared by every process: flags first, then `GPUFAILOVER_*` env vars, then defaults.

Each option is declared once, as a field of a frozen dataclass made with `setting(...)`: its
default, env var, flag(s) and help. From that one declaration come the argparse options
(`add_arguments`, the default shown in `--help`), the reading of flags and env vars with their
precedence (`resolve`; a bad env value is a SystemExit naming the variable) and the docs'
settings tables (`python -m gpufailover.cli.settings_doc`).

A stdlib layer rather than pydantic-settings: the node agent's light install (pyproject
`dependencies`) would otherwise carry pydantic and its compiled core for ~40 options of
str/int/float/bool, and our flags keep names, aliases and `dest`s that users already rely on.

An env name may hold `{SERVICE}`: the service's name in upper case (`job-status` ->
`JOB_STATUS`), for options every consumer service has under its own variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpufailover.local_broker import recorded_bootstrap

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# Every --bootstrap flag says this: the order `default_bootstrap` really follows.
BOOTSTRAP_HELP = (
    "Kafka bootstrap (env GPUFAILOVER_BOOTSTRAP or KAFKA_BOOTSTRAP, else the broker from "
    f"`gpufailover broker start` in GPUFAILOVER_STATE_DIR, else {DEFAULT_BOOTSTRAP})"
)
# The docs' default of a bootstrap setting (the env var is GPUFAILOVER_BOOTSTRAP).
BOOTSTRAP_DEFAULT_TEXT = (
    f"KAFKA_BOOTSTRAP, else `gpufailover broker start`'s broker, else {DEFAULT_BOOTSTRAP}"
)
DEFAULT_METRICS_HOST = "127.0.0.1"

_KEY = "gpufailover.setting"
DOCS_ATTRIBUTE = "gpufailover_settings"  # on a parser: the settings it declares, for the docs
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
T = TypeVar("T")


@dataclass(frozen=True)
class Setting:
    """One option's declaration (the field's `metadata`); the field holds the default."""

    env: str
    flags: tuple[str, ...]
    help: str
    kind: type  # str, int, float or bool (a bool is a store_true flag)
    choices: tuple[str, ...] | None = None
    shown_default: str | None = None  # for the docs when the default is computed
    label: str = ""  # what a refused value is called: "<label> must be one of ..."
    plain_help: bool = False  # `help` already says the env var and the default
    convert: Callable[[str], str] | None = None  # applied to a str value first (str.upper)

    @property
    def dest(self) -> str:
        """The flag's attribute in argparse's namespace (none for an env-only option)."""
        return self.flags[0].lstrip("-").replace("-", "_") if self.flags else ""

    def env_name(self, service: str = "") -> str:
        return self.env.replace("{SERVICE}", service.upper().replace("-", "_"))


def setting(
    default: Any,
    *,
    env: str,
    flag: str | tuple[str, ...] = (),
    help: str,
    kind: type | None = None,
    choices: tuple[str, ...] | None = None,
    shown_default: str | None = None,
    label: str = "",
    plain_help: bool = False,
    convert: Callable[[str], str] | None = None,
) -> Any:
    """A dataclass field declaring one option (see the module docstring)."""
    declared = Setting(
        env=env,
        flags=(flag,) if isinstance(flag, str) else flag,
        help=help,
        kind=kind or (type(default) if default is not None else str),
        choices=choices,
        shown_default=shown_default,
        label=label,
        plain_help=plain_help,
        convert=convert,
    )
    return dataclasses.field(default=default, metadata={_KEY: declared})


def bootstrap_setting(default: str | None = "") -> Any:
    """`--bootstrap` / GPUFAILOVER_BOOTSTRAP, declared the same by every command that talks to
    Kafka (an empty or None value means `default_bootstrap()`)."""
    return setting(
        default,
        env="GPUFAILOVER_BOOTSTRAP",
        flag="--bootstrap",
        kind=str,
        help=BOOTSTRAP_HELP,
        plain_help=True,
        shown_default=BOOTSTRAP_DEFAULT_TEXT,
    )


def topic_prefix_setting(default: str | None = "", *, short_flag: bool = False) -> Any:
    """`--topic-prefix` (and `--prefix` where `short_flag`) / GPUFAILOVER_TOPIC_PREFIX."""
    flags = ("--prefix", "--topic-prefix") if short_flag else ("--topic-prefix",)
    return setting(
        default, env="GPUFAILOVER_TOPIC_PREFIX", flag=flags, kind=str, help="topic name prefix"
    )


def declared(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Setting]]:
    """The fields of a settings class that declare an option, in order."""
    for f in dataclasses.fields(cls):
        found = f.metadata.get(_KEY)
        if isinstance(found, Setting):
            yield f, found


def shown_default(f: dataclasses.Field[Any], s: Setting, service: str = "") -> str:
    """The default as `--help` and the docs say it ("" when there is none to say)."""
    if s.shown_default is not None:
        return s.shown_default.replace("{service}", service)
    if s.kind is bool or f.default in (None, ""):
        return ""
    value = f.default
    return f"{value:g}" if isinstance(value, float) else str(value)


def help_text(f: dataclasses.Field[Any], s: Setting, service: str = "") -> str:
    if s.plain_help:
        return s.help
    default = shown_default(f, s, service)
    where = f"env {s.env_name(service)}" + (f", default {default}" if default else "")
    return f"{s.help} ({where})".replace("%", "%%")


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    service: str = "",
    only: tuple[str, ...] | None = None,
    suppress: bool = False,
    document: bool = True,
) -> None:
    """One argparse option per declared field of `cls` (or of those named in `only`); a field
    declared with no flag is read from its env var only.

    Every option defaults to None so that `resolve` can tell a flag given from one left out
    (`suppress`: absent from the namespace instead, on a sub-action's parser so that it does
    not clobber the parent's value). The parser remembers the options for the docs
    (`gpufailover.cli.settings_doc`) unless `document` is off (documented once elsewhere).
    """
    documented: list[tuple[dataclasses.Field[Any], Setting, str]] = getattr(
        parser, DOCS_ATTRIBUTE, []
    )
    setattr(parser, DOCS_ATTRIBUTE, documented)
    for f, s in declared(cls):
        if only is not None and f.name not in only:
            continue
        if document:
            documented.append((f, s, service))
        if not s.flags:
            continue
        options: dict[str, Any] = {
            "dest": s.dest,
            "default": argparse.SUPPRESS if suppress else None,
        }
        if s.kind is bool:
            options["action"] = "store_true"
        else:
            options["type"] = s.convert or s.kind
            if s.choices is not None:
                options["choices"] = s.choices
        parser.add_argument(*s.flags, help=help_text(f, s, service), **options)


def env_value(s: Setting, default: Any, service: str = "") -> Any:
    """The option's env var parsed, else `default`. An empty number, switch or choice counts as
    unset; an empty string is a value (some options mean something by '')."""
    name = s.env_name(service)
    raw = os.environ.get(name)
    if raw is None or (raw == "" and (s.kind is not str or s.choices is not None)):
        return default
    return parse(s, name, raw)


def parse(s: Setting, name: str, raw: str) -> Any:
    """`raw` (from variable `name`) as the option's kind; SystemExit naming `name` if it is not."""
    if s.kind is bool:
        word = raw.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise SystemExit(f"{name}={raw!r}: expected one of {', '.join(_TRUE + _FALSE)}")
    if s.kind in (int, float):
        try:
            return s.kind(raw)
        except ValueError:
            what = "an integer" if s.kind is int else "a number"
            raise SystemExit(f"{name}={raw!r}: expected {what}") from None
    if s.convert is not None:
        raw = s.convert(raw)
    if s.choices is not None and raw not in s.choices:
        raise SystemExit(
            f"{s.label or s.dest.replace('_', ' ') or 'value'} must be one of {s.choices}, "
            f"got {raw!r} (from {name})"
        )
    return raw


def value_of(
    args: argparse.Namespace | None, f: dataclasses.Field[Any], s: Setting, service: str = ""
) -> Any:
    """The flag when given, else the env var, else the field's default."""
    given = getattr(args, s.dest, None) if args is not None and s.dest else None
    if given is not None and not (s.kind is bool and given is False):
        return given
    return env_value(s, f.default, service)


def values(cls: type, args: argparse.Namespace | None, *, service: str = "") -> dict[str, Any]:
    """Each declared field of `cls` by name: its flag, else env var, else default."""
    return {f.name: value_of(args, f, s, service) for f, s in declared(cls)}


def resolve(cls: type[T], args: argparse.Namespace | None, *, service: str = "", **fixed: Any) -> T:
    """An instance of `cls`: each declared field from its flag, else env, else default; the
    other (undeclared) fields, and any declared one to override, from `fixed`."""
    return cls(**{**values(cls, args, service=service), **fixed})


# -- the broker to talk to ----------------------------------------------------------------------


def default_bootstrap() -> str:
    """GPUFAILOVER_BOOTSTRAP, else KAFKA_BOOTSTRAP, else the broker `gpufailover broker start`
    left running in GPUFAILOVER_STATE_DIR, else 127.0.0.1:9092."""
    for name in ("GPUFAILOVER_BOOTSTRAP", "KAFKA_BOOTSTRAP"):
        value = os.environ.get(name)
        if value:
            return value
    return recorded_bootstrap(state_dir()) or DEFAULT_BOOTSTRAP


# -- readers of single variables (options not declared as fields yet) ----------------------------


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    return int(env_value(Setting(name, (), "", int), default))


def env_float(name: str, default: float) -> float:
    return float(env_value(Setting(name, (), "", float), default))


def env_bool(name: str, default: bool) -> bool:
    return bool(env_value(Setting(name, (), "", bool), default))


def state_dir() -> Path:
    return Path(env_str("GPUFAILOVER_STATE_DIR", str(Path.home() / ".cache" / "gpufailover")))


def metrics_host() -> str:
    """The address metrics and web servers bind: this host only unless opened on purpose
    (GPUFAILOVER_METRICS_HOST=0.0.0.0, as a Prometheus scraping pods needs)."""
    return env_str("GPUFAILOVER_METRICS_HOST", "") or DEFAULT_METRICS_HOST
