"""The early commit: one at a time, again if asked while one runs, failures logged."""

from __future__ import annotations

import asyncio

import pytest

from streams.worker_hooks import CommitSoon


class Commits:
    """faust's `Consumer.commit` as CommitSoon sees it: each call waits to be released."""

    def __init__(self, fail: bool = False) -> None:
        self.started = 0
        self.fail = fail
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def commit(self) -> bool:
        self.started += 1
        self.entered.set()
        await self.release.wait()
        if self.fail:
            raise RuntimeError("coordinator went away")
        return True


async def settle(soon: CommitSoon) -> None:
    running = soon._running
    assert running is not None
    await running


async def test_one_request_one_commit() -> None:
    commits = Commits()
    soon = CommitSoon(commits.commit)
    soon.request()
    commits.release.set()
    await settle(soon)
    assert commits.started == 1


async def test_requests_while_one_runs_give_one_more_commit_after_it() -> None:
    commits = Commits()
    soon = CommitSoon(commits.commit)
    soon.request()
    await commits.entered.wait()
    soon.request()  # e.g. a second partition's cap lifted after the first commit read offsets
    soon.request()
    assert commits.started == 1  # never two at once
    commits.release.set()
    await settle(soon)
    assert commits.started == 2


async def test_a_failed_commit_is_logged_and_the_next_request_commits_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    commits = Commits(fail=True)
    soon = CommitSoon(commits.commit)
    soon.request()
    commits.release.set()
    await settle(soon)
    assert "early commit failed (RuntimeError('coordinator went away'))" in caplog.text
    commits.fail = False
    soon.request()
    await settle(soon)
    assert commits.started == 2
