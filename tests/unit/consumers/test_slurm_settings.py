"""Choosing the Slurm actuator and the Slurm requeue stage: flags, env vars, bad values."""

from __future__ import annotations

import pytest

from consumers.quarantine.actuator import Reconciler, make_actuator
from consumers.quarantine.actuator_slurm import SlurmActuator
from consumers.quarantine.config import QuarantineSettings
from consumers.requeue.config import RequeueSettings
from gpufailover.cli import build_parser


def test_flags_select_the_slurm_actuator_and_the_slurm_requeue_stage() -> None:
    parser = build_parser()
    q = QuarantineSettings.from_env_and_args(
        parser.parse_args(["quarantine", "--actuator", "slurm"])
    )
    r = RequeueSettings.from_env_and_args(parser.parse_args(["requeue", "--scheduler", "slurm"]))
    assert (q.actuator, r.scheduler) == ("slurm", "slurm")
    actuator = make_actuator(q.actuator, q.scheduler, None)
    assert isinstance(actuator, SlurmActuator) and isinstance(actuator, Reconciler)


def test_env_vars_select_them_and_the_defaults_touch_no_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RequeueSettings.from_env_and_args(None).scheduler == "none"
    assert QuarantineSettings.from_env_and_args(None).actuator == "log"
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_ACTUATOR", "slurm")
    monkeypatch.setenv("GPUFAILOVER_REQUEUE_SCHEDULER", "slurm")
    monkeypatch.setenv("GPUFAILOVER_REQUEUE_BACKOFF_S", "0.5")
    assert QuarantineSettings.from_env_and_args(None).actuator == "slurm"
    r = RequeueSettings.from_env_and_args(None)
    assert (r.scheduler, r.backoff.first_ms) == ("slurm", 500)


def test_unknown_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_ACTUATOR", "kubectl")
    with pytest.raises(SystemExit, match="actuator must be one of"):
        QuarantineSettings.from_env_and_args(None)
    monkeypatch.setenv("GPUFAILOVER_REQUEUE_SCHEDULER", "pbs")
    with pytest.raises(SystemExit, match="requeue scheduler must be one of"):
        RequeueSettings.from_env_and_args(None)
