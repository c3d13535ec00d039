"""The fuzz suite at CI size (issue 12, item 8): hostile records of every input topic through
replay, the signal filter, the job agent and the consumers; no crash, every refused record
dead-lettered once with a reason, exactly the records the decoders and bounds refuse.

Full size (100,000 records per topic and target): `python -m tests.fuzz`; numbers in
RELIABILITY.md. GPUFAILOVER_FUZZ_RECORDS sets the size here too.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from tests.fuzz.harness import TARGETS, run_all
from tests.fuzz.mutate import DICT_MUTATIONS, PIPELINE_TOPICS, hostile, records

CI_RECORDS = int(os.environ.get("GPUFAILOVER_FUZZ_RECORDS", "1500"))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_hostile_records_never_crash_and_are_dead_lettered_once(target: str) -> None:
    [result] = run_all(CI_RECORDS, seed=12, targets=[target])
    assert result.crashes == 0, result.examples
    assert result.wrong == 0, result.examples
    assert result.records >= CI_RECORDS
    assert 0 < result.dead_lettered < result.records  # most refused, the valid ones taken
    assert set(result.kinds) == {"decode"}  # refused for a reason in the record, not a bug


def test_the_generator_covers_every_kind_of_hostile_input() -> None:
    rng = random.Random(3)
    seen: Counter[str] = Counter()
    for _ in range(6_000):
        for m in hostile(rng.choice(PIPELINE_TOPICS), rng).mutations:
            seen[m] += 1
    wanted = set(DICT_MUTATIONS) | {"utf8", "surrogate", "truncate", "not_object", "deep"}
    assert wanted | {"tombstone", "empty", "unknown_topic"} <= set(seen)


def test_the_same_seed_gives_the_same_records() -> None:
    first = list(records(PIPELINE_TOPICS, 50, seed=5))
    assert first == list(records(PIPELINE_TOPICS, 50, seed=5))
    assert first != list(records(PIPELINE_TOPICS, 50, seed=6))
