"""The requeue service: a `jobs.requeue` command for every failover/retry decision.

Public API: `run_requeue(settings, stop)` (in `consumers.requeue.app`) and `RequeueSettings`
(in `consumers.requeue.config`); its command in `gpufailover.cli.requeue` calls `app.serve`.
"""
