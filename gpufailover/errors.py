"""The failures a command reports in one line, each with its exit code (table in
`gpufailover.cli.errors`). Kernel and components raise these; the CLI prints them."""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BROKER_UNREACHABLE = 3
EXIT_TOPICS_MISSING = 4
EXIT_NOT_AUTHORIZED = 5
EXIT_NOT_FOUND = 6
EXIT_WRONG_STATE = 7

HINT_BROKER = (
    "start one with `gpufailover broker start`, or point --bootstrap / GPUFAILOVER_BOOTSTRAP "
    "at a running broker"
)
HINT_TOPICS = "create them with `gpufailover topics create` (same --bootstrap and --prefix)"
HINT_AUTH = (
    "check the --security-protocol/--sasl-*/--ssl-* settings (or GPUFAILOVER_* env) and the "
    "principal's ACLs (`gpufailover acls show`)"
)


_TOPICS_SHOWN = 3  # a missing topic set is named this far; the message stays one short line


class CliError(Exception):
    """A command failed in a way the user can act on; the message says how."""

    exit_code = EXIT_FAILED


class UsageError(CliError, ValueError):
    exit_code = EXIT_USAGE


class BrokerUnreachable(CliError):
    exit_code = EXIT_BROKER_UNREACHABLE

    def __init__(self, bootstrap: str, detail: str = "") -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(f"cannot reach Kafka at {bootstrap}{why}; {HINT_BROKER}")


class TopicsMissing(CliError, LookupError):
    exit_code = EXIT_TOPICS_MISSING

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.topics = topics
        shown = ", ".join(topics[:_TOPICS_SHOWN])
        if len(topics) > _TOPICS_SHOWN:
            shown += f" and {len(topics) - _TOPICS_SHOWN} more"
        super().__init__(f"topics missing (or not readable) on {bootstrap}: {shown}; {HINT_TOPICS}")


class NotAuthorized(CliError):
    exit_code = EXIT_NOT_AUTHORIZED

    def __init__(self, bootstrap: str, detail: str) -> None:
        super().__init__(f"not authorized on {bootstrap}: {detail}; {HINT_AUTH}")


class NotFound(CliError, LookupError):
    exit_code = EXIT_NOT_FOUND


class WrongState(CliError):
    """The target exists but is not in a state the command acts on; nothing was changed."""

    exit_code = EXIT_WRONG_STATE
