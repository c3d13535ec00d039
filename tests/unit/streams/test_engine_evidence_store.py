"""The per-node evidence list (streams/engine/evidence.py) at the edges of its time rules: the
coalescing window, the cap, and the retention horizon, each exactly at its boundary."""

from __future__ import annotations

from schemas.decisions import Evidence
from streams.engine import evidence as ev

COALESCE = 1_000
CAP = 3


def item(ts: int, code: int = 79, gpu: int | None = 0, last: int | None = None) -> Evidence:
    return Evidence("node-a", gpu, "xid", code, ts, "hardware", 1, last)


def test_repeat_exactly_one_coalesce_window_before_the_first_occurrence_coalesces() -> None:
    items = [item(10_000)]
    stored, before = ev.add(items, item(10_000 - COALESCE), COALESCE, CAP)
    assert before == item(10_000)
    assert items == [stored]
    assert (stored.ts_ms, stored.last_ts_ms, stored.count) == (10_000 - COALESCE, 10_000, 2)


def test_repeat_just_outside_the_window_before_the_first_is_a_new_item() -> None:
    items = [item(10_000)]
    stored, before = ev.add(items, item(10_000 - COALESCE - 1), COALESCE, CAP)
    assert before is None
    assert items == [item(10_000), stored]


def test_repeat_exactly_one_window_after_the_last_occurrence_coalesces() -> None:
    items = [item(10_000, last=12_000)]
    stored, before = ev.add(items, item(12_000 + COALESCE), COALESCE, CAP)
    assert before is not None
    assert (stored.ts_ms, stored.last_ts_ms, stored.count) == (10_000, 12_000 + COALESCE, 2)
    assert ev.add(items, item(13_000 + COALESCE + 1), COALESCE, CAP)[1] is None


def test_earlier_repeat_moves_the_first_occurrence_back_and_keeps_the_last() -> None:
    items = [item(10_000, last=10_500)]
    stored, _ = ev.add(items, item(9_800), COALESCE, CAP)
    assert (stored.ts_ms, stored.last_ts_ms) == (9_800, 10_500)


def test_coalesced_repeat_adds_its_own_count_and_span() -> None:
    items = [item(10_000)]
    folded = Evidence("node-a", 0, "xid", 79, 10_200, "hardware", 5, 10_900)
    stored, _ = ev.add(items, folded, COALESCE, CAP)
    assert (stored.ts_ms, stored.last_ts_ms, stored.count) == (10_000, 10_900, 6)


def test_other_gpu_code_or_kind_never_coalesces() -> None:
    items = [item(10_000)]
    for other in (
        item(10_000, gpu=1),
        item(10_000, code=48),
        Evidence("node-a", 0, "health", 79, 10_000, "hardware"),
    ):
        assert ev.add(items, other, COALESCE, cap=10)[1] is None
    assert len(items) == 4


def test_over_the_cap_the_item_seen_least_recently_is_dropped_not_the_first() -> None:
    # The first item is the most recent one: dropping by position would drop it.
    items = [item(50_000, code=1), item(20_000, code=2, last=21_000), item(30_000, code=3)]
    stored, before = ev.add(items, item(40_000, code=4), COALESCE, CAP)
    assert before is None
    assert [e.code for e in items] == [1, 3, 4]
    assert stored in items


def test_cap_compares_last_occurrences_not_first() -> None:
    items = [item(10_000, code=1, last=60_000), item(20_000, code=2), item(30_000, code=3)]
    ev.add(items, item(40_000, code=4), COALESCE, CAP)
    assert [e.code for e in items] == [1, 3, 4]


def test_prune_keeps_an_item_last_seen_exactly_at_the_horizon() -> None:
    kept, dropped = item(5_000, code=1, last=9_000), item(5_000, code=2, last=8_999)
    items = [kept, dropped]
    ev.prune(items, 9_000)
    assert items == [kept]


def test_prune_judges_coalesced_items_by_their_last_occurrence() -> None:
    items = [item(1_000, last=9_500), item(9_200, code=2)]
    ev.prune(items, 9_300)
    assert [e.code for e in items] == [79]


def test_in_window_edges_are_inclusive_and_use_the_last_occurrence() -> None:
    e = item(10_000, last=12_000)
    assert ev.in_window(e, 12_000, 20_000)
    assert not ev.in_window(e, 12_001, 20_000)
    assert ev.in_window(e, 0, 10_000)
    assert not ev.in_window(e, 0, 9_999)
    assert ev.in_window(item(10_000), 10_000, 10_000)
