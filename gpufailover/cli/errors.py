"""What a failed `gpufailover` command prints and exits with: one line and a distinct code.

Commands raise (or let through) exceptions; `gpufailover.cli.main` turns the known kinds into
one line saying what went wrong and what to do next. Anything else is a bug and keeps its
traceback. Long-running services do not come here for broker trouble: they keep retrying.

| exit | meaning              | raised as                                                  |
|------|----------------------|------------------------------------------------------------|
| 0    | done                 |                                                            |
| 1    | failed otherwise     | CliError, any other Kafka error (aiokafka's KafkaError)     |
| 2    | bad usage            | argparse, UsageError                                       |
| 3    | broker unreachable   | BrokerUnreachable, KafkaConnectionError, timeouts          |
| 4    | topics missing       | TopicsMissing, UnknownTopicOrPartitionError                |
| 5    | not authorized       | NotAuthorized, aiokafka authorization/authentication errors |
| 6    | not found            | NotFound (unknown job, ...)                                |
| 7    | wrong state          | WrongState (node not quarantined, broker has no authorizer) |
| 69   | missing extra        | a `[pipeline]` module missing (gpufailover/cli/extras.py)     |
"""

from __future__ import annotations

import logging

from gpufailover.errors import (
    EXIT_BROKER_UNREACHABLE,
    EXIT_FAILED,
    EXIT_NOT_AUTHORIZED,
    EXIT_TOPICS_MISSING,
    HINT_TOPICS,
    BrokerUnreachable,
    CliError,
    NotAuthorized,
)


def explain(exc: BaseException, bootstrap: str) -> tuple[int, str] | None:
    """(exit code, one-line message) for a failure the user can act on; None for a bug.
    `bootstrap` is the broker the command was pointed at, for the message."""
    if isinstance(exc, CliError):
        return exc.exit_code, _one_line(str(exc))
    if isinstance(exc.__cause__, Exception):  # a wrapped authorization failure stays one
        cause = _explain_kafka(exc.__cause__, bootstrap)
        if cause is not None and cause[0] == EXIT_NOT_AUTHORIZED:
            return cause
    kafka = _explain_kafka(exc, bootstrap)
    if kafka is not None:
        return kafka
    if isinstance(exc, ConnectionError | TimeoutError):
        return EXIT_BROKER_UNREACHABLE, str(BrokerUnreachable(bootstrap, type(exc).__name__))
    return None


def _explain_kafka(exc: BaseException, bootstrap: str) -> tuple[int, str] | None:
    try:  # imported here: `gpufailover --help` and replay do not load aiokafka
        from aiokafka import errors as ak
    except ImportError:
        return None
    from deploy.kafka_admin import KafkaUnavailableError

    detail = str(exc) or type(exc).__name__
    unreachable = (ak.KafkaConnectionError, ak.KafkaTimeoutError, KafkaUnavailableError)
    if isinstance(exc, unreachable):
        return EXIT_BROKER_UNREACHABLE, str(BrokerUnreachable(bootstrap, type(exc).__name__))
    denied = (
        ak.TopicAuthorizationFailedError,
        ak.GroupAuthorizationFailedError,
        ak.ClusterAuthorizationFailedError,
        ak.TransactionalIdAuthorizationFailed,
        ak.AuthenticationFailedError,
        ak.SaslAuthenticationFailed,
    )
    if isinstance(exc, denied):
        return EXIT_NOT_AUTHORIZED, _one_line(str(NotAuthorized(bootstrap, detail)))
    if isinstance(exc, ak.UnknownTopicOrPartitionError):
        return EXIT_TOPICS_MISSING, _one_line(f"a topic is missing on {bootstrap}; {HINT_TOPICS}")
    if isinstance(exc, ak.KafkaError):
        return EXIT_FAILED, _one_line(f"{bootstrap} refused: {type(exc).__name__}: {detail}")
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def quiet_kafka_client_logs() -> None:
    """A one-shot command reports its own failure in one line; aiokafka's connection errors
    would repeat it as log noise."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
