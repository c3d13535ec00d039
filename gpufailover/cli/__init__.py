"""The one `gpufailover` command: each subsystem registers its own subcommands.

Modules are listed by name and imported here, but each keeps heavy imports (faust, aiokafka,
pynvml) inside its command functions so `gpufailover --help` and `replay` stay light.
Commands raise on failure; `main` prints the one-line message and exit code that
`gpufailover.cli.errors` assigns (its docstring is the table of exit codes).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from gpufailover import __version__, settings
from gpufailover.cli.options import Logging

# Each module exposes `register(subparsers) -> None`; its parsers set `func(args) -> int`.
COMMAND_MODULES: tuple[str, ...] = (
    "gpufailover.cli.replay",  # replay
    "gpufailover.cli.broker",  # broker start|stop|status
    "gpufailover.cli.topics",  # topics create|list
    "gpufailover.cli.acls",  # acls apply|show
    "gpufailover.cli.audit",  # audit
    "gpufailover.cli.classifier",  # classifier
    "gpufailover.cli.run",  # run
    "gpufailover.cli.quarantine",  # quarantine, quarantine release|reset-breaker
    "gpufailover.cli.requeue",  # requeue
    "gpufailover.cli.status",  # status JOB
    "gpufailover.cli.agent",  # agent
    "gpufailover.cli.publish",  # publish started|terminated|...
    "gpufailover.cli.k8s_events",  # k8s-events
    "gpufailover.cli.demo",  # demo
    "gpufailover.cli.bench",
    "gpufailover.cli.chaos",  # chaos
    "gpufailover.cli.explain",  # explain JOB
    "gpufailover.cli.export",  # export --since
    "gpufailover.cli.goodput",  # goodput
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufailover",
        description="Keep GPU training jobs running when the hardware under them breaks.",
    )
    parser.add_argument("--version", action="version", version=f"gpufailover {__version__}")
    settings.add_arguments(parser, Logging)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a subsystem not built yet
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.log_level = settings.resolve(Logging, args).log_level  # the commands read it too
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = func(args)
    except ModuleNotFoundError as exc:
        from gpufailover.cli.extras import EXIT_MISSING_EXTRA, hint_for

        hint = hint_for(exc)
        if hint is None:
            raise
        print(f"gpufailover {args.command}: {hint}", file=sys.stderr)
        return EXIT_MISSING_EXTRA
    except Exception as exc:  # known failures become one line (table in cli_errors); bugs raise
        from gpufailover.cli.errors import explain
        from gpufailover.settings import default_bootstrap

        explained = explain(exc, getattr(args, "bootstrap", None) or default_bootstrap())
        if explained is None:
            raise
        code, message = explained
        print(f"gpufailover {args.command}: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
