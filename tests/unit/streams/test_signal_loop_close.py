"""The signal filter's closing steps are bounded: a worker asked to stop must stop, even when
a commit or a client's stop hangs (the rest still runs; what was not committed is re-read)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.signal_loop import close_within


async def test_a_hanging_step_is_cut_off_and_the_next_ones_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []
    never = asyncio.Event()

    async def commit() -> None:
        ran.append("commit")
        await never.wait()  # hangs, as a commit to a coordinator that never answers

    async def stop_consumer() -> None:
        ran.append("consumer")

    async def stop_producer() -> None:
        ran.append("producer")

    with caplog.at_level(logging.WARNING, logger="gpufailover.classifier"):
        await asyncio.wait_for(
            close_within(
                [
                    ("last commit", commit),
                    ("consumer stop", stop_consumer),
                    ("producer stop", stop_producer),
                ],
                timeout_s=0.05,
            ),
            timeout=10,
        )
    assert ran == ["commit", "consumer", "producer"]
    assert "last commit took over 0.05 s: skipped (records re-read)" in caplog.text


async def test_a_failing_step_is_logged_and_the_next_ones_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    async def commit() -> None:
        raise RuntimeError("coordinator gone")

    async def stop_consumer() -> None:
        ran.append("consumer")

    with caplog.at_level(logging.WARNING, logger="gpufailover.classifier"):
        await close_within([("last commit", commit), ("consumer stop", stop_consumer)], 5.0)
    assert ran == ["consumer"]
    assert "last commit failed (RuntimeError('coordinator gone'))" in caplog.text


async def test_steps_that_finish_in_time_run_in_order_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def step(name: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            await asyncio.sleep(0)
            ran.append(name)

        return run

    with caplog.at_level(logging.WARNING, logger="gpufailover.classifier"):
        await close_within([(n, step(n)) for n in ("a", "b", "c")], 5.0)
    assert ran == ["a", "b", "c"]
    assert caplog.text == ""
