"""The invariants: what the pipeline published against what replay of the same input decides.

Pure: `check(expected, observed, round_of_ts)` returns every violation with the round of the
input that caused it. A decision is compared on the fields that act on the fleet (verdict,
action, suspect nodes, next attempt, rule); the evidence list is not (its coalesced counts are
a snapshot that depends on how partitions interleave). A decision published twice unchanged is
a redelivery (counted, harmless downstream: every consumer is idempotent per (job, attempt));
two different decisions for one (job, attempt) are a duplicate.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, int]  # (job_id, attempt)

DECISIONS_MISSING = "decisions missing"
DECISIONS_DUPLICATED = "decisions duplicated"
DECISIONS_DIFFERENT = "decisions different"
QUARANTINES_MISSING = "quarantines missing"
QUARANTINES_FALSE = "quarantines false"
QUARANTINES_DUPLICATED = "quarantines duplicated"
REQUEUES_MISSING = "requeues missing"
REQUEUES_DUPLICATED = "requeues duplicated"
REQUEUES_FALSE = "requeues false"
DEAD_LETTERS_MISSING = "dead letters missing"
DEAD_LETTERS_DUPLICATED = "dead letters duplicated"
DEAD_LETTERS_FALSE = "dead letters false"
OVERDUE = "overdue decisions"
STALLED = "stalled partitions"
VIOLATIONS: tuple[str, ...] = (
    DECISIONS_MISSING,
    DECISIONS_DUPLICATED,
    DECISIONS_DIFFERENT,
    QUARANTINES_MISSING,
    QUARANTINES_FALSE,
    QUARANTINES_DUPLICATED,
    REQUEUES_MISSING,
    REQUEUES_DUPLICATED,
    REQUEUES_FALSE,
    DEAD_LETTERS_MISSING,
    DEAD_LETTERS_DUPLICATED,
    DEAD_LETTERS_FALSE,
    OVERDUE,
    STALLED,
)
# Information, not violations:
REDELIVERED = "decisions redelivered"
DEAD_LETTERS_REDELIVERED = "dead letters redelivered"
# The requeue service keeps one requeue watermark per job: a decision for an attempt older than
# one it already requeued publishes nothing (that attempt's successor already runs). The
# workload is open-loop (attempt k+1 starts without waiting for k's requeue), so when the
# pipeline decides k+1 before k, k's requeue is superseded, not lost.
REQUEUES_SUPERSEDED = "requeues superseded"
INFORMATION: tuple[str, ...] = (REDELIVERED, REQUEUES_SUPERSEDED, DEAD_LETTERS_REDELIVERED)
COMPARED = ("verdict", "action", "suspect_nodes", "next_attempt", "rule")
REQUEUED_ACTIONS = frozenset({"failover", "retry"})
NO_ROUND = -1  # a finding no input round explains (e.g. a quarantine of an unknown node)
# The harness's reader stores each output record's Kafka timestamp (wall clock, ms) under this
# key, so that a duplicate or wrong output can be tied to the fault just before it.
WALL_MS = "_chaos_wall_ms"


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A malformed record the harness published, where it landed, and why it is bad."""

    topic: str  # real topic name
    partition: int
    offset: int
    raw: str
    round: int
    why: str


@dataclass(frozen=True)
class Expected:
    decisions: Mapping[Key, Mapping[str, Any]]  # replay's, by (job, attempt)
    quarantines: Counter[str]  # replay's quarantine episodes per node
    terminations: Mapping[Key, int]  # every termination published -> its round
    bad: tuple[BadRecord, ...]
    quarantine_rounds: Mapping[str, int] = field(default_factory=dict)  # node -> input round


@dataclass(frozen=True)
class Observed:
    decisions: Sequence[Mapping[str, Any]]  # failover.decisions values
    quarantine_requests: Sequence[Mapping[str, Any]]  # failover.quarantine-requests values
    quarantines: Sequence[Mapping[str, Any]]  # nodes.quarantine values (state quarantined)
    requeues: Sequence[Mapping[str, Any]]  # jobs.requeue values
    dead_letters: Sequence[Mapping[str, Any]]  # every <topic>.dlq value, either format
    # group -> {topic[partition]: records not committed} when the wait for quiescence ended
    lag: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Finding:
    column: str
    round: int
    subject: str  # job/attempt, node, or topic[partition]@offset
    detail: str
    wall_ms: int | None = None  # when the offending output was written (None: it is absent)


@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    expected_decisions: int = 0
    observed_decisions: int = 0

    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.column in VIOLATIONS]

    def counts(self) -> dict[int, Counter[str]]:
        """Findings per round and column."""
        out: dict[int, Counter[str]] = defaultdict(Counter)
        for f in self.findings:
            out[f.round][f.column] += 1
        return out


def compared(decision: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(
        tuple(sorted(decision.get(k) or ())) if k == "suspect_nodes" else decision.get(k)
        for k in COMPARED
    )


def _key(value: Mapping[str, Any]) -> Key:
    return (str(value.get("job_id")), int(value.get("attempt", -1)))


def _wall(record: Mapping[str, Any]) -> int | None:
    value = record.get(WALL_MS)
    return value if isinstance(value, int) else None


def _show(decision: Mapping[str, Any]) -> str:
    verdict, action, suspects, next_attempt, rule = compared(decision)
    return f"{verdict}/{action} suspects {list(suspects)} next {next_attempt} rule {rule}"


def check(expected: Expected, observed: Observed, round_of_ts: Callable[[int], int]) -> Result:
    result = Result(expected_decisions=len(expected.decisions))
    result.findings += _decisions(expected, observed, result)
    result.findings += _quarantines(expected, observed, round_of_ts)
    result.findings += _requeues(expected, observed)
    result.findings += _dead_letters(expected.bad, observed.dead_letters)
    result.findings += [
        Finding(STALLED, NO_ROUND, f"{group} {where}", f"{n} records never committed")
        for group, parts in sorted(observed.lag.items())
        for where, n in sorted(parts.items())
    ]
    return result


def _decisions(expected: Expected, observed: Observed, result: Result) -> Iterable[Finding]:
    seen: dict[Key, list[Mapping[str, Any]]] = defaultdict(list)
    for d in observed.decisions:
        seen[_key(d)].append(d)
    result.observed_decisions = len(seen)
    rounds = expected.terminations

    def where(key: Key) -> int:
        return rounds.get(key, NO_ROUND)

    for key, want in sorted(expected.decisions.items()):
        got = seen.get(key, [])
        subject = f"{key[0]}/{key[1]}"
        if not got:
            yield Finding(DECISIONS_MISSING, where(key), subject, f"replay: {_show(want)}")
            continue
        distinct = Counter(compared(d) for d in got)
        if len(distinct) > 1:
            shown = "; ".join(_show(d) for d in _first_of_each(got))
            later = _wall(_first_of_each(got)[1])
            yield Finding(
                DECISIONS_DUPLICATED, where(key), subject, f"{len(distinct)}: {shown}", later
            )
        firsts = {id(d) for d in _first_of_each(got)}
        for again in (d for d in got if id(d) not in firsts):
            yield Finding(REDELIVERED, where(key), subject, _show(again), _wall(again))
        wrong = [d for d in _first_of_each(got) if compared(d) != compared(want)]
        if wrong:
            shown = "; ".join(_show(d) for d in wrong)
            detail = f"kafka {shown} | replay {_show(want)}"
            yield Finding(DECISIONS_DIFFERENT, where(key), subject, detail, _wall(wrong[0]))
    for key in sorted(seen.keys() - expected.decisions.keys()):
        subject = f"{key[0]}/{key[1]}"
        shown = _show(seen[key][0])
        detail = f"kafka {shown} | replay none"
        yield Finding(DECISIONS_DIFFERENT, where(key), subject, detail, _wall(seen[key][0]))
    for key in sorted(rounds.keys() - seen.keys()):
        yield Finding(OVERDUE, where(key), f"{key[0]}/{key[1]}", "terminated, never decided")


def _first_of_each(decisions: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for d in decisions:
        out.setdefault(compared(d), d)
    return list(out.values())


def _quarantines(
    expected: Expected, observed: Observed, round_of_ts: Callable[[int], int]
) -> Iterable[Finding]:
    """The effect is nodes.quarantine; the classifier's requests say whose fault a miss is."""
    records: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for q in observed.quarantines:
        records[str(q.get("node"))].append(q)
    requests: Counter[str] = Counter(str(q.get("node")) for q in observed.quarantine_requests)
    first_ts = {
        str(q.get("node")): int(q.get("ts_ms", 0))
        for q in reversed([*observed.quarantine_requests, *observed.quarantines])
    }
    for node in sorted(expected.quarantines.keys() | records.keys()):
        want, got = expected.quarantines.get(node, 0), len(records.get(node, []))
        rnd = expected.quarantine_rounds.get(node, NO_ROUND)
        if rnd == NO_ROUND and node in first_ts:
            rnd = round_of_ts(first_ts[node])
        asked = f"{requests[node]} request(s) from the classifier"
        if want and got < want:
            yield Finding(QUARANTINES_MISSING, rnd, node, f"{got} of {want} recorded; {asked}")
        elif not want:
            jobs = sorted({str(q.get("job_id")) for q in records[node]})
            detail = f"replay: none; jobs {jobs}; {asked}"
            yield Finding(QUARANTINES_FALSE, rnd, node, detail, _wall(records[node][0]))
        elif got > want:
            detail = f"{got} records for {want}; {asked}"
            yield Finding(QUARANTINES_DUPLICATED, rnd, node, detail, _wall(records[node][want]))
    for node in sorted(requests.keys() - expected.quarantines.keys() - records.keys()):
        rnd = round_of_ts(first_ts[node])
        yield Finding(QUARANTINES_FALSE, rnd, node, "requested by the classifier; replay: none")


def _requeues(expected: Expected, observed: Observed) -> Iterable[Finding]:
    """Against the decisions the pipeline published: the requeue service acts on those."""
    wanted = {_key(d) for d in observed.decisions if d.get("action") in REQUEUED_ACTIONS}
    got = Counter(_key(r) for r in observed.requeues)
    last = {_key(r): _wall(r) for r in observed.requeues}
    rounds = expected.terminations
    for key in sorted(wanted | got.keys()):
        rnd, subject = rounds.get(key, NO_ROUND), f"{key[0]}/{key[1]}"
        if key in wanted and not got[key]:
            later = sorted(a for j, a in got if j == key[0] and a > key[1])
            if later:
                detail = f"no requeue: attempt(s) {later} were requeued before it was decided"
                yield Finding(REQUEUES_SUPERSEDED, rnd, subject, detail)
            else:
                yield Finding(REQUEUES_MISSING, rnd, subject, "failover/retry decided, no requeue")
        elif key not in wanted:
            detail = "requeued without a failover/retry"
            yield Finding(REQUEUES_FALSE, rnd, subject, detail, last[key])
        elif got[key] > 1:
            detail = f"{got[key]} requeue records"
            yield Finding(REQUEUES_DUPLICATED, rnd, subject, detail, last[key])


def _dead_letters(
    bad: tuple[BadRecord, ...], letters: Sequence[Mapping[str, Any]]
) -> Iterable[Finding]:
    """Dead letters are matched by original coordinates, else by raw value. They are exactly
    once by key (the coordinates): a copy identical but for its write time, re-sent by an
    at-least-once writer after a crash or rebalance, is a redelivery (counted, not a
    violation); two different letters for one record are duplicates."""
    by_coords: dict[tuple[Any, ...], BadRecord] = {(b.topic, b.partition, b.offset): b for b in bad}
    count: Counter[BadRecord] = Counter()
    contents: dict[BadRecord, set[str]] = {}
    last: dict[BadRecord, int | None] = {}
    for letter in letters:
        coords = (letter.get("topic"), letter.get("partition"), letter.get("offset"))
        match = by_coords.get(coords)
        if match is None:
            raw = letter.get("raw", letter.get("value"))
            match = next((b for b in bad if b.raw == raw and b.topic == coords[0]), None)
        if match is None:
            where = f"{coords[0]}[{coords[1]}]@{coords[2]}"
            detail = str(letter.get("error"))
            yield Finding(DEAD_LETTERS_FALSE, NO_ROUND, where, detail, _wall(letter))
            continue
        count[match] += 1
        last[match] = _wall(letter)
        content = {k: v for k, v in letter.items() if k not in ("dead_lettered_ts_ms", WALL_MS)}
        contents.setdefault(match, set()).add(repr(sorted(content.items())))
    for b in bad:
        where = f"{b.topic}[{b.partition}]@{b.offset}"
        if not count[b]:
            yield Finding(DEAD_LETTERS_MISSING, b.round, where, b.why)
        elif len(contents[b]) > 1:
            detail = f"{count[b]}x, {len(contents[b])} different: {b.why}"
            yield Finding(DEAD_LETTERS_DUPLICATED, b.round, where, detail, last[b])
        elif count[b] > 1:
            detail = f"{count[b]}x, identical: {b.why}"
            yield Finding(DEAD_LETTERS_REDELIVERED, b.round, where, detail, last[b])
