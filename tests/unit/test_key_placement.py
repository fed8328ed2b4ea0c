"""What places keys in partitions (the hash algorithm and seed) is part of the graph's
fingerprint and of keyed checkpoint manifests: a change is refused with a message naming it, or
let through where nothing journaled depends on it; a changed function body is no change.

The interpreter cannot change its hash algorithm or seed mid-process, so "the next run" is
`key_placement` with another seed, put where the graph and the store read it."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any

import pytest

from connectors.offsets import OffsetRange
from service.driver.recovery import GRAPH_KEY, check_graph
from service.errors import GraphChanged
from service.graph import checkpoint_store, context
from service.graph.checkpoint_store import CheckpointError, CheckpointStore, PieceManifest
from service.graph.context import StreamingContext
from service.graph.key_placement import key_placement
from service.journal.base import JournalState
from service.journal.records import CompletedRecord, EpochRecord, PlannedRecord
from sinks.memory import MemorySink

pytestmark = pytest.mark.unit


def add_up(values: list[int], state: int | None) -> int:
    return (state or 0) + sum(values)


def add_up_rewritten(values: list[int], state: int | None) -> int:
    total = state if state is not None else 0
    for value in values:
        total += value
    return total


def graph(stateful: bool, update: Any = add_up) -> StreamingContext:
    ctx = StreamingContext(None, "placed", 1000, 2)
    pairs = ctx.queue_stream([[("a", 1)]], "q")
    if stateful:
        pairs.update_state_by_key(update).write("out", MemorySink())
    else:
        pairs.reduce_by_key(operator.add).write("out", MemorySink())
    return ctx


def journal_of(ctx: StreamingContext, *, completed: bool, legacy: bool = False) -> JournalState:
    """What a driver of `ctx` journaled for batch 1000 (completed or not); `legacy`: as a
    dstreams that did not record the key placement yet."""
    fingerprint = ctx.fingerprint(with_key_placement=not legacy)
    graph_json = json.loads(ctx.graph_json(with_key_placement=not legacy))
    extra = {"queue:q": 0, GRAPH_KEY: graph_json}
    records: list[Any] = [
        EpochRecord(1, 0, "a"),
        PlannedRecord(1, 1000, (OffsetRange("t", 0, 0, 1),), fingerprint, extra),
    ]
    if completed:
        records.append(CompletedRecord(1, 1000, {"out": 1}))
    return JournalState.from_records(records)


def next_run_seed(monkeypatch: pytest.MonkeyPatch, seed: str) -> None:
    monkeypatch.setattr(context, "key_placement", lambda: key_placement(seed))
    monkeypatch.setattr(checkpoint_store, "key_placement", lambda: key_placement(seed))


def test_the_fingerprint_holds_the_hash_algorithm_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = graph(stateful=True)
    placement = json.loads(ctx.graph_json())["key_placement"]
    assert "portable_hash" in placement and "PYTHONHASHSEED=0" in placement
    before = ctx.fingerprint()
    next_run_seed(monkeypatch, "42")
    assert ctx.fingerprint() != before


def test_a_changed_seed_under_state_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    journaled = journal_of(graph(stateful=True), completed=True)
    next_run_seed(monkeypatch, "42")

    with pytest.raises(GraphChanged) as refused:
        check_graph(journaled, graph(stateful=True))
    assert "PYTHONHASHSEED=0" in str(refused.value) and "PYTHONHASHSEED=42" in str(refused.value)


def test_a_changed_seed_with_an_unfinished_batch_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journaled = journal_of(graph(stateful=False), completed=False)  # its replay shuffles
    next_run_seed(monkeypatch, "42")
    with pytest.raises(GraphChanged, match="keys are placed in partitions by"):
        check_graph(journaled, graph(stateful=False))


def test_a_changed_seed_where_nothing_depends_on_it_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journaled = journal_of(graph(stateful=False), completed=True)
    next_run_seed(monkeypatch, "42")
    check_graph(journaled, graph(stateful=False))  # no state, nothing to replay: handled


def test_a_journal_from_before_the_placement_was_recorded_recovers() -> None:
    check_graph(journal_of(graph(stateful=True), completed=False, legacy=True), graph(True))


def test_a_changed_function_body_with_the_same_graph_is_no_change() -> None:
    before, after = graph(True, add_up), graph(True, add_up_rewritten)
    assert before.fingerprint() == after.fingerprint()
    check_graph(journal_of(before, completed=False), after)


def test_a_checkpoint_placed_under_another_seed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    (tmp_path / "1000" / "state").mkdir(parents=True)
    manifest = PieceManifest.from_reports("state", [])
    assert manifest.key_placement == key_placement()
    (tmp_path / "1000" / "state" / "_manifest.json").write_text(json.dumps(manifest.to_json()))
    store.verify("1000/state")  # the same placement: usable

    next_run_seed(monkeypatch, "42")
    with pytest.raises(CheckpointError, match="PYTHONHASHSEED=0.*PYTHONHASHSEED=42"):
        store.verify("1000/state")


def test_rows_and_older_manifests_carry_no_placement() -> None:
    assert PieceManifest.from_reports("rows", []).key_placement is None
    older = PieceManifest.from_reports("state", []).to_json()
    del older["key_placement"]
    assert PieceManifest.from_json(older).key_placement is None
