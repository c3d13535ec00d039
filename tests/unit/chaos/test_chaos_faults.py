"""The fault schedule is a function of the seed and keeps the worker count in bounds."""

from __future__ import annotations

import pytest

from gpufailover.chaos import faults as f


def plan(seed: int, kinds: tuple[str, ...] = f.KINDS, workers: int = 2) -> list[f.Fault]:
    return f.schedule(seed, 30, kinds, workers=workers, max_workers=4, round_s=4.0)


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert plan(7) == plan(7)


def test_other_seeds_give_other_schedules() -> None:
    assert len({tuple(plan(seed)) for seed in range(10)}) == 10


def test_round_zero_is_left_alone_and_times_fall_inside_their_round() -> None:
    schedule = plan(3)
    assert schedule
    assert all(x.round >= 1 for x in schedule)
    assert all(0.0 <= x.at_s <= 4.0 * 0.8 for x in schedule)
    assert all(x.down_s <= 4.0 for x in schedule)
    assert [(x.round, x.at_s) for x in schedule] == sorted((x.round, x.at_s) for x in schedule)


def test_only_the_chosen_kinds_occur() -> None:
    kinds = (f.KILL_QUARANTINE, f.BROKER_RESTART)
    assert {x.kind for x in plan(5, kinds)} <= set(kinds)


def test_a_long_schedule_uses_every_kind() -> None:
    assert {
        x.kind for x in f.schedule(1, 200, f.KINDS, workers=2, max_workers=4, round_s=4)
    } == set(f.KINDS)


@pytest.mark.parametrize("seed", range(20))
def test_workers_stay_between_one_and_the_maximum(seed: int) -> None:
    count = 2
    for x in plan(seed):
        if x.worker is not None:
            assert 0 <= x.worker < count
        count += {f.ADD_WORKER: 1, f.REMOVE_WORKER: -1}.get(x.kind, 0)
        assert 1 <= count <= 4


def test_only_kills_have_a_downtime_and_only_worker_faults_a_worker() -> None:
    for x in plan(11):
        if x.kind not in f.KILLED_SERVICE:
            assert x.down_s == 0.0
        assert (x.worker is not None) == (x.kind in (f.KILL_CLASSIFIER, f.REMOVE_WORKER))


def test_parse_kinds() -> None:
    assert f.parse_kinds("all") == f.KINDS
    assert f.parse_kinds("none") == ()
    assert f.parse_kinds("kill-requeue, add-worker") == (f.KILL_REQUEUE, f.ADD_WORKER)
    with pytest.raises(ValueError, match="unknown fault kind"):
        f.parse_kinds("kill-everything")


def test_faults_per_round() -> None:
    assert f.parse_per_round("2") == (2, 2)
    assert f.parse_per_round("0-3") == (0, 3)
    for bad in ("x", "3-1", "-1"):
        with pytest.raises(ValueError, match="faults per round"):
            f.parse_per_round(bad)
    two = f.schedule(4, 10, f.KINDS, workers=2, max_workers=4, round_s=4, per_round=(2, 2))
    assert all(sum(x.round == r for x in two) == 2 for r in range(1, 10))
    none = f.schedule(4, 10, f.KINDS, workers=2, max_workers=4, round_s=4, per_round=(0, 0))
    assert none == []
