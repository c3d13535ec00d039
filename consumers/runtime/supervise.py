"""Run a service's stages side by side; the first to fail stops the others."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def run_together(*stages: Coroutine[Any, Any, None]) -> None:
    """Await every stage. When one raises, cancel the rest and raise its error (not a group:
    callers see what failed). Cancelling this cancels them all."""
    tasks = [asyncio.create_task(stage) for stage in stages]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
