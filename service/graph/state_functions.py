"""Bodies of the window and state operators: plain top-level functions with no Spark import.

They run on executors inside `mapPartitions` and pickle by reference, like
`service.graph.functions`. The wiring lives in `service.graph.window` and `service.graph.state`.

Records of a state RDD are `(key, (kind, value, touched_ms))`: `kind` says whether the key's state
was kept as it was (`KEEP`), changed in this batch (`CHANGED`), or whether the record is an output
of `map_with_state` (`OUTPUT`, `value` being the mapped record); `touched_ms` is the batch time of
the key's last input value, which timeouts measure idleness from. New input values travel as
`(key, (NEW, index, position, value))`, tagged with their input partition and position so that a
key's values reach the update function in input order on every replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from service.errors import DStreamsError

KEEP = 0
CHANGED = 1
OUTPUT = 2
NEW = 3

StateEntry = tuple[int, Any, int]
UpdateFunction = Callable[[list[Any], Any], Any]
MappingFunction = Callable[[int, Any, Any, "State"], Any]


class StateError(DStreamsError):
    """A state function used its `State` in a way that has no meaning (e.g. updating a key
    that is timing out, or reading a state that does not exist)."""


# --- windows -----------------------------------------------------------------------------------


def tag_window_value(tag: int, pair: tuple[Any, Any]) -> tuple[Any, tuple[int, Any]]:
    """`(k, v) -> (k, (tag, v))`: marks where a value comes from in an incremental window."""
    return (pair[0], (tag, pair[1]))


PREVIOUS = 0
ENTERING = 1
LEAVING = 2


def merge_window_partition(
    reduce: Callable[[Any, Any], Any],
    inverse: Callable[[Any, Any], Any],
    rows: Iterable[tuple[Any, tuple[int, Any]]],
) -> Iterator[tuple[Any, Any]]:
    """One partition of an incremental window: previous window, minus the batches that left,
    plus the batches that entered, per key (the paper's reduce with an inverse function).

    A key with neither a previous nor an entering value has nothing to subtract from: its
    leaving values are ignored (a `filter_fn` may only drop keys whose value is the identity)."""
    previous: dict[Any, Any] = {}
    entering: dict[Any, Any] = {}
    leaving: dict[Any, Any] = {}
    by_tag = (previous, entering, leaving)
    for key, (tag, value) in rows:
        target = by_tag[tag]
        target[key] = reduce(target[key], value) if key in target else value
    for key in list(previous) + [k for k in entering if k not in previous]:
        if key in previous:
            value = previous[key]
            if key in entering:
                value = reduce(value, entering[key])
        else:
            value = entering[key]
        if key in leaving:
            value = inverse(value, leaving[key])
        yield (key, value)


def has_rows(rows: Iterable[Any]) -> Iterator[bool]:
    """Whether a partition holds any row (one bool per partition)."""
    yield any(True for _ in rows)


def filter_pairs(
    predicate: Callable[[tuple[Any, Any]], bool], rows: Iterable[tuple[Any, Any]]
) -> Iterator[tuple[Any, Any]]:
    """Keeps the `(key, value)` pairs `predicate` accepts (partition-preserving filter)."""
    return (row for row in rows if predicate(row))


def pass_through(rows: Iterable[Any]) -> Iterator[Any]:
    """Identity over a partition: gives a window its own persisted copy of a batch's RDD."""
    return iter(rows)


def key_by_none(value: Any) -> tuple[None, Any]:
    """`x -> (None, x)`: a whole-stream reduction is a reduction by one key."""
    return (None, value)


def constant_one(_value: Any) -> int:
    return 1


def subtract(left: Any, right: Any) -> Any:
    return left - right


def count_is_not_zero(pair: tuple[Any, int]) -> bool:
    """`count_by_value_and_window` drops values whose count fell back to zero."""
    return pair[1] != 0


# --- state -------------------------------------------------------------------------------------


def tag_new_values(index: int, rows: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """`(k, v) -> (k, (NEW, partition, position, v))`: new values remember their input order."""
    for position, (key, value) in enumerate(rows):
        yield (key, (NEW, index, position, value))


def tag_new_values_at(
    batch_time: int, index: int, rows: Iterable[tuple[Any, Any]]
) -> Iterator[tuple[Any, Any]]:
    """`tag_new_values` with the batch time after them, for `fold_batches`: the merges read only
    the first four fields of a `NEW` entry."""
    for position, (key, value) in enumerate(rows):
        yield (key, (NEW, index, position, value, batch_time))


def fold_batches(
    merge: Callable[[int, Iterable[Any]], Iterator[Any]],
    batch_times: tuple[int, ...],
    rows: Iterable[Any],
) -> Iterator[Any]:
    """One partition's state carried through several batches in one pass (recovery's catch-up):
    `merge` once per batch, in order, over the records it would have seen had each batch run on
    its own — the previous batch's records, then the batch's new values (`tag_new_values_at`) in
    the order they arrived. The records in between stay in this worker's memory instead of
    going through Spark's block store once per batch."""
    current: list[Any] = []
    news: dict[int, list[Any]] = {t: [] for t in batch_times}
    for row in rows:
        entry = row[1]
        if entry[0] == NEW:
            news[entry[4]].append(row)
        else:
            current.append(row)
    for batch_time in batch_times:
        current.extend(news.pop(batch_time))
        current = list(merge(batch_time, current))
    return iter(current)


def initial_entries(batch_time: int, rows: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
    """The job's initial `(key, state)` pairs as state records, as if touched at `batch_time`."""
    for key, value in rows:
        yield (key, (KEEP, value, batch_time))


def split_partition(
    rows: Iterable[tuple[Any, tuple[Any, ...]]],
) -> tuple[dict[Any, tuple[Any, int]], dict[Any, list[tuple[int, int, Any]]]]:
    """Old state `{key: (value, touched)}` and new values `{key: [(index, position, value)]}`
    of one partition of the union of the previous state and the batch's input."""
    states: dict[Any, tuple[Any, int]] = {}
    news: dict[Any, list[tuple[int, int, Any]]] = {}
    for key, entry in rows:
        if entry[0] == NEW:
            news.setdefault(key, []).append((entry[1], entry[2], entry[3]))
        elif entry[0] != OUTPUT:
            states[key] = (entry[1], entry[2])
    return states, news


def keys_in_order(
    states: dict[Any, tuple[Any, int]], news: dict[Any, list[tuple[int, int, Any]]]
) -> list[Any]:
    """Old keys in their previous order, then new keys in the order their first value arrived,
    so a partition's records come out in the same order on every replay."""
    fresh = [key for key in news if key not in states]
    fresh.sort(key=lambda key: min(news[key]))
    return [*states, *fresh]


def ordered_values(tagged: list[tuple[int, int, Any]] | None) -> list[Any]:
    if not tagged:
        return []
    tagged.sort(key=lambda item: (item[0], item[1]))
    return [item[2] for item in tagged]


def update_state_partition(
    update: UpdateFunction, ttl_ms: int | None, batch_time: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, StateEntry]]:
    """`update_state_by_key` over one partition: `update(new_values, state)` for every key with
    new values or state; None removes the key. Keys come out as `keys_in_order` puts them.
    With `ttl_ms`, a key whose last value came `ttl_ms` or more of batch time ago is dropped
    instead, without a call.

    Most keys of a large state get no value in a batch; they take a short path (no value list
    to sort, no lookup of a second dict), since this loop runs once per key per batch."""
    states, news = _entries_and_news(rows)
    expired_before = batch_time - ttl_ms if ttl_ms is not None else None
    for key, (_kind, old, touched) in states.items():
        tagged = news.pop(key, None)
        if tagged is None:
            if expired_before is not None and touched <= expired_before:
                continue
            new = update([], old)
            if new is not None:
                yield (key, (KEEP if _same(new, old) else CHANGED, new, touched))
            continue
        new = update(values_in_order(tagged), old)
        if new is not None:
            yield (key, (KEEP if _same(new, old) else CHANGED, new, batch_time))
    for key, tagged in sorted(news.items(), key=first_arrival):
        new = update(values_in_order(tagged), None)
        if new is not None:
            yield (key, (CHANGED, new, batch_time))


def _entries_and_news(
    rows: Iterable[tuple[Any, tuple[Any, ...]]],
) -> tuple[dict[Any, tuple[Any, ...]], dict[Any, list[tuple[Any, ...]]]]:
    """Like `split_partition`, but keeping the records' entries as they are (no tuple is
    rebuilt per key): old state entries by key, and each key's `NEW` entries."""
    states: dict[Any, tuple[Any, ...]] = {}
    news: dict[Any, list[tuple[Any, ...]]] = {}
    for key, entry in rows:
        kind = entry[0]
        if kind == NEW:
            tagged = news.get(key)
            if tagged is None:
                news[key] = [entry]
            else:
                tagged.append(entry)
        elif kind != OUTPUT:
            states[key] = entry
    return states, news


def values_in_order(tagged: list[tuple[Any, ...]]) -> list[Any]:
    """The values of a key's `NEW` entries, by (input partition, position)."""
    if len(tagged) > 1:
        tagged.sort(key=_arrival)
    return [entry[3] for entry in tagged]


def _arrival(entry: tuple[Any, ...]) -> tuple[int, int]:
    return (entry[1], entry[2])


def first_arrival(item: tuple[Any, list[tuple[Any, ...]]]) -> tuple[int, int]:
    return min(_arrival(entry) for entry in item[1])


def _same(left: Any, right: Any) -> bool:
    if left is right:
        return True
    try:
        return bool(left is right or left == right)
    except Exception:  # noqa: BLE001 - an odd __eq__ only costs a "changed" mark
        return False


class State:
    """What a `map_with_state` function sees of one key's state (see `StateSpec`)."""

    __slots__ = ("_exists", "_removed", "_timing_out", "_updated", "_value")

    def __init__(self, value: Any, exists: bool, timing_out: bool = False) -> None:
        self._value = value
        self._exists = exists
        self._timing_out = timing_out
        self._updated = False
        self._removed = False

    def exists(self) -> bool:
        return self._exists

    def get(self) -> Any:
        if not self._exists:
            msg = "State.get() on a key without state; check state.exists() first"
            raise StateError(msg)
        return self._value

    def update(self, value: Any) -> None:
        if self._timing_out:
            msg = "State.update() on a key that is timing out; a timed-out key is dropped"
            raise StateError(msg)
        if value is None:
            msg = "State.update(None): use state.remove() to drop a key's state"
            raise StateError(msg)
        self._value, self._exists, self._updated, self._removed = value, True, True, False

    def remove(self) -> None:
        self._value, self._exists, self._removed = None, False, True

    def is_timing_out(self) -> bool:
        return self._timing_out

    @property
    def changed(self) -> bool:
        return self._updated or self._removed


def map_with_state_partition(
    function: MappingFunction,
    timeout_ms: int | None,
    batch_time: int,
    rows: Iterable[Any],
) -> Iterator[tuple[Any, StateEntry]]:
    """`map_with_state` over one partition: the function once per new value in input order,
    and once (timing out) for each key idle for `timeout_ms` of batch time, which is dropped."""
    states, news = split_partition(rows)
    for key in keys_in_order(states, news):
        old = states.get(key)
        values = ordered_values(news.get(key))
        if values:
            yield from _map_values(function, batch_time, key, old, values)
        elif old is not None and timeout_ms is not None and batch_time - old[1] >= timeout_ms:
            mapped = function(batch_time, key, None, State(old[0], True, timing_out=True))
            if mapped is not None:
                yield (key, (OUTPUT, mapped, batch_time))
        elif old is not None:
            yield (key, (KEEP, old[0], old[1]))


def _map_values(
    function: MappingFunction,
    batch_time: int,
    key: Any,
    old: tuple[Any, int] | None,
    values: list[Any],
) -> Iterator[tuple[Any, StateEntry]]:
    state = State(old[0] if old else None, old is not None)
    for value in values:
        mapped = function(batch_time, key, value, state)
        if mapped is not None:
            yield (key, (OUTPUT, mapped, batch_time))
    if state.exists():
        yield (key, (CHANGED if state.changed or old is None else KEEP, state.get(), batch_time))


def is_state_entry(row: tuple[Any, StateEntry]) -> bool:
    return row[1][0] != OUTPUT


def state_pairs(rows: Iterable[tuple[Any, StateEntry]]) -> Iterator[tuple[Any, Any]]:
    """The `(key, state)` pairs of a state RDD's records."""
    for key, entry in rows:
        if entry[0] != OUTPUT:
            yield (key, entry[1])


def changed_pairs(rows: Iterable[tuple[Any, StateEntry]]) -> Iterator[tuple[Any, Any]]:
    """The `(key, state)` pairs whose state changed (or appeared) in this batch."""
    for key, entry in rows:
        if entry[0] == CHANGED:
            yield (key, entry[1])


def mapped_records(rows: Iterable[tuple[Any, StateEntry]]) -> Iterator[Any]:
    """What a `map_with_state` function returned, in partition order."""
    for _key, entry in rows:
        if entry[0] == OUTPUT:
            yield entry[1]
