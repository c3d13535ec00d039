"""On `broker start --secure` with the role ACLs: each role can do its job and nothing else,
and a client without credentials is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from deploy.broker import Broker
from gpufailover.kafka import make_producer
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.topics import TopicNames
from tests.integration.secure.conftest import cli_as, produce_as, read_all, role_env

XID = {"node": "gpu-1", "xid": 79, "ts_ms": 1_700_000_000_000}


async def test_an_unauthenticated_client_is_refused(secure_broker: Broker) -> None:
    plain = make_producer(secure_broker.bootstrap, "anonymous", security=PLAINTEXT)
    with pytest.raises(KafkaError):
        await plain.start()
    await plain.stop()
    agent = secure_broker.security("agent")
    wrong = KafkaSecurity(agent.protocol, username="agent", password="guess", cafile=agent.cafile)
    forger = make_producer(secure_broker.bootstrap, "forger", security=wrong)
    with pytest.raises(KafkaError):
        await forger.start()
    await forger.stop()


async def test_the_agent_writes_telemetry_and_nothing_else(
    secure_broker: Broker, secure_names: TopicNames
) -> None:
    b, n, agent = secure_broker.bootstrap, secure_names, secure_broker.security("agent")
    await produce_as(b, agent, [(n.gpu_xid, "gpu-1", XID)])
    forged = {
        n.failover_decisions: {"job_id": "j", "verdict": "hardware"},
        n.nodes_quarantine: {"node": "gpu-2", "state": "quarantined"},
        n.operators_audit: {"kind": "breaker-reset", "reason": "forged"},
        n.quarantine_requests: {"node": "gpu-2", "state": "quarantined"},
        # only the quarantine service asks agents to validate (docs/node-lifecycle.md)
        n.nodes_validate: {"node": "gpu-2", "request_id": "forged", "open": True},
    }
    for topic, value in forged.items():
        with pytest.raises(TopicAuthorizationFailedError):
            await produce_as(b, agent, [(topic, "k", value)])
    seen = await read_all(b, secure_broker.security(), [n.gpu_xid, *forged])
    assert [(t, k) for t, k, _ in seen] == [(n.gpu_xid, "gpu-1")], "nothing forged was written"
    with pytest.raises(TopicAuthorizationFailedError):
        await read_all(b, agent, [n.gpu_xid])  # it writes telemetry; it does not read it


async def test_only_the_operator_can_reset_the_breaker(
    secure_broker: Broker, secure_names: TopicNames
) -> None:
    b, n = secure_broker.bootstrap, secure_names
    target = ("--bootstrap", b, "--prefix", n.prefix)
    reset = ("quarantine", "reset-breaker", "--reason", "test", *target)
    agent = role_env(secure_broker, "agent")
    for refused in (reset, ("status", "job-1", *target), ("audit", *target)):
        rc, _, err = await cli_as(agent, *refused)
        assert rc == 5 and err.startswith(f"gpufailover {refused[0]}: not authorized on {b}"), err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert await read_all(b, secure_broker.security(), [n.operators_audit]) == []
    operator = role_env(secure_broker, "operator")
    rc, _, err = await cli_as(operator, *reset)
    assert rc == 0, err
    rc, out, err = await cli_as(operator, "audit", *target)
    assert rc == 0, err
    [(_, key, audit)] = await read_all(b, secure_broker.security(), [n.operators_audit])
    assert key == "breaker-reset"
    assert (audit["principal"], audit["authenticated"], audit["reason"]) == (
        "operator",
        True,
        "test",
    )
    assert "operator" in out and "breaker-reset" in out, out


async def test_the_scheduler_hook_and_the_telemetry_client_publish_as_their_roles(
    secure_broker: Broker, secure_names: TopicNames
) -> None:
    import asyncio

    from producers.telemetry import TelemetryClient

    b, n = secure_broker.bootstrap, secure_names
    publish = (
        "publish", "terminated", "--job-id", "job-7", "--attempt", "0", "--nodes", "gpu-1",
        "--reason", "OOMKilled", "--bootstrap", b, "--topic-prefix", n.prefix, "--timeout", "20",
    )  # fmt: skip
    rc, _, err = await cli_as(role_env(secure_broker, "agent"), *publish)
    assert rc == 5 and "not authorized" in err and "Traceback" not in err, err
    rc, _, err = await cli_as(role_env(secure_broker, "scheduler"), *publish)
    assert rc == 0, err
    client = TelemetryClient(
        "job-7", bootstrap=b, topics=n, security=secure_broker.security("telemetry")
    )
    client.heartbeat(10)
    await asyncio.to_thread(client.close, 30.0)
    assert (client.sent, client.dropped) == (1, 0)
    seen = await read_all(b, secure_broker.security(), [n.jobs_events, n.training_telemetry])
    assert sorted((t, k) for t, k, _ in seen) == [
        (n.jobs_events, "job-7"),
        (n.training_telemetry, "job-7"),
    ]


async def test_the_node_agent_publishes_as_the_agent_role(
    secure_broker: Broker, secure_names: TopicNames, tmp_path: Path
) -> None:
    import asyncio
    import time

    from tests.integration.kafka_io import Service

    b, n = secure_broker.bootstrap, secure_names
    log = tmp_path / "kern.log"
    log.write_text(
        "[  966.50] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus.\n"
    )
    args = [
        "agent", "--source", f"file:{log}", "--from-start", "--node", "gpu-17",
        "--bootstrap", b, "--topic-prefix", n.prefix,
    ]  # fmt: skip
    with Service(args, tmp_path / "agent.log", role_env(secure_broker, "agent")) as agent:
        deadline = time.monotonic() + 60
        while not (seen := await read_all(b, secure_broker.security(), [n.gpu_xid])):
            assert time.monotonic() < deadline, agent.log_tail()
            await asyncio.sleep(0.5)  # a poll interval with a deadline, not a fixed wait
    [(_, key, xid)] = seen
    assert (key, xid["xid"]) == ("gpu-17", 79)
    assert "Authenticated as agent via SCRAM-SHA-512" in agent.log_tail(200)


async def test_the_node_agent_runs_its_validation_as_the_agent_role(
    secure_broker: Broker, secure_names: TopicNames, tmp_path: Path
) -> None:
    """The agent role may read nodes.validate and answer on nodes.validation-results: a
    request the quarantine role writes is run and answered (docs/node-lifecycle.md)."""
    import asyncio
    import shlex
    import sys
    import time

    from schemas.quarantine import ValidationRequest
    from tests.integration.kafka_io import Service

    b, n = secure_broker.bootstrap, secure_names
    (tmp_path / "kern.log").touch()
    command = shlex.join([sys.executable, "-c", "print('diag ok')"])
    args = [
        "agent", "--source", f"file:{tmp_path / 'kern.log'}", "--node", "gpu-17",
        "--bootstrap", b, "--topic-prefix", n.prefix, "--spool-dir", "none",
        "--validate-command", command,
    ]  # fmt: skip
    request = ValidationRequest("gpu-17", "operator-0-0", "operator", "test", True, 1)
    quarantine = secure_broker.security("quarantine")
    await produce_as(b, quarantine, [(n.nodes_validate, "gpu-17", request.to_dict())])
    with Service(args, tmp_path / "agent.log", role_env(secure_broker, "agent")) as agent:
        deadline = time.monotonic() + 60
        while not [
            v
            for _, _, v in await read_all(b, secure_broker.security(), [n.validation_results])
            if v.get("kind") == "result"
        ]:
            assert time.monotonic() < deadline, agent.log_tail()
            await asyncio.sleep(0.5)  # a poll interval with a deadline, not a fixed wait
    seen = await read_all(b, secure_broker.security(), [n.validation_results])
    kinds = sorted((k, v["kind"], v.get("result")) for _, k, v in seen)
    assert kinds == [("gpu-17", "repair", None), ("gpu-17", "result", "pass")]


async def test_the_operator_reads_what_explain_and_export_need(
    secure_broker: Broker, secure_names: TopicNames
) -> None:
    b, n = secure_broker.bootstrap, secure_names
    target = ("--bootstrap", b, "--prefix", n.prefix)
    started = (
        "publish", "started", "--job-id", "job-9", "--attempt", "0", "--nodes", "gpu-9",
        "--bootstrap", b, "--topic-prefix", n.prefix, "--timeout", "20",
    )  # fmt: skip
    rc, _, err = await cli_as(role_env(secure_broker, "scheduler"), *started)
    assert rc == 0, err
    explain, export = ("explain", "job-9", *target), ("export", "--since", "1h", *target)
    for refused in (explain, export):  # the agent writes telemetry; it reads none of it
        rc, _, err = await cli_as(role_env(secure_broker, "agent"), *refused)
        assert rc == 5 and "not authorized" in err and "Traceback" not in err, err
    operator = role_env(secure_broker, "operator")
    rc, out, err = await cli_as(operator, *explain)
    assert rc == 0 and "job job-9" in out and "started on gpu-9" in out, err
    rc, out, err = await cli_as(operator, *export)
    assert rc == 0, err
    assert any('"job-9"' in line and '"started"' in line for line in out.splitlines()), out
