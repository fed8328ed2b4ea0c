"""Live state queries asked during a chaos run, and their check against the reference.

`QueryPoller` asks every running driver of a run for the running totals of a sample of words
(`GET /state/<name>/<word>`) from a thread of its own, across crashes and restarts: a refused
connection, a reset, or a 503 (recovering, no completed batch yet) is expected while a driver is
down or starting and is simply asked again later. Every 200 and 404 is kept with the batch it
names and the PID of the process that answered.

`check_answers` then holds each answer to the reference as of the batch it names: the word's
total over the lines of every journaled batch up to and including that one (a 404 exactly when
that total is 0), the batch journaled completed, and completed by the answering driver's epoch or
an earlier one (an answer from a batch a later driver had to finish was published before it was
complete).
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from service.dev.service_process import ServiceProcess
from service.journal.base import JournalState
from service.journal.records import CompletedRecord

# A query reads one partition with a Spark job; on a loaded 2-core machine that may take seconds.
QUERY_TIMEOUT_S = 20.0
PAUSE_S = 0.1
"""Between two queries: a query costs the driver a Spark job or two, the run's batches more."""


@dataclass(frozen=True)
class Answer:
    """A 200 (`value` the word's total) or 404 (`value` None: no total yet), as of
    `batch_time`, from the driver process `pid` (`driver` its name in the test)."""

    word: str
    driver: str
    pid: int
    batch_time: int
    value: int | None


@dataclass
class QueryReport:
    answers: int = 0
    absent: int = 0
    epochs: Counter[int] = field(default_factory=Counter)
    batches: set[int] = field(default_factory=set)

    def __str__(self) -> str:
        epochs = ", ".join(f"epoch {e}: {n}" for e, n in sorted(self.epochs.items()))
        return (
            f"{self.answers} state query answers equal the reference ({self.absent} of them "
            f"404), naming {len(self.batches)} batches; by answering epoch: {epochs}"
        )


class QueryPoller(threading.Thread):
    """Asks each running one of `drivers` for the `state` of `words` in turn, from entering a `with`
    block until leaving it (whatever ends it); then `finish` hands the answers over."""

    def __init__(self, drivers: Sequence[ServiceProcess], state: str, words: Sequence[str]) -> None:
        super().__init__(name="state-query-poller", daemon=True)
        self.drivers, self.state_name = list(drivers), state
        self.words = itertools.cycle(words)
        self.answers: list[Answer] = []
        self.unexpected: list[tuple[str, int, str]] = []
        """(driver, HTTP status, body) of answers that are neither 200, 404 of a key nor 503."""
        self.unavailable = 0
        self.error: BaseException | None = None
        self._stop_asking = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_asking.is_set():
                for driver in self.drivers:
                    if driver.running():
                        self.ask(driver, next(self.words))
                self._stop_asking.wait(PAUSE_S)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def ask(self, driver: ServiceProcess, word: str) -> None:
        pid = driver.pid
        path = f"/state/{self.state_name}/{urllib.parse.quote(word, safe='')}"
        try:
            with urllib.request.urlopen(  # noqa: S310 - loopback only
                f"http://127.0.0.1:{driver.port}{path}", timeout=QUERY_TIMEOUT_S
            ) as reply:
                status, body = int(reply.status), bytes(reply.read())
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        except (OSError, http.client.HTTPException):
            return  # down, starting, or killed while answering: ask again later
        if driver.pid != pid:
            return  # restarted meanwhile: the answer's process is not known for sure
        if status == 503:
            self.unavailable += 1
            return
        document = json.loads(body) if body.startswith(b"{") else {}
        if status not in (200, 404) or "batch_time_ms" not in document:
            self.unexpected.append((driver.name, status, body.decode(errors="replace")))
            return
        assert document["key"] == word, document
        value = int(document["value"]) if status == 200 else None
        self.answers.append(Answer(word, driver.name, pid, int(document["batch_time_ms"]), value))

    def __enter__(self) -> QueryPoller:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop_asking.set()
        self.join(QUERY_TIMEOUT_S + 10)

    def finish(self) -> list[Answer]:
        """Every answer kept, once stopped. Fails on an answer that is no state query's."""
        assert self._stop_asking.is_set() and not self.is_alive(), "the poller did not stop"
        if self.error is not None:
            msg = f"the state query poller failed: {self.error!r}"
            raise AssertionError(msg) from self.error
        assert not self.unexpected, f"unexpected state query answers: {self.unexpected[:5]}"
        return self.answers


def check_answers(
    answers: Sequence[Answer], state: JournalState, read: dict[int, Counter[str]]
) -> QueryReport:
    """Each answer equals the reference as of the batch it names (`read`: the word counts each
    journaled batch read), and that batch was journaled completed by the answering driver's
    epoch or one before it."""
    epoch_of = {int(r.owner.rpartition(":")[2]): r.epoch for r in state.epochs}
    first_completed: dict[int, int] = {}
    for record in state.records:
        if isinstance(record, CompletedRecord):
            first_completed.setdefault(record.batch_time, record.epoch)
    report = QueryReport()
    for answer in answers:
        t = answer.batch_time
        assert t in first_completed, f"{answer}: batch {t} was never journaled completed"
        assert answer.pid in epoch_of, f"{answer}: no journaled epoch was opened by that PID"
        epoch = epoch_of[answer.pid]
        assert first_completed[t] <= epoch, (
            f"{answer}: answered by epoch {epoch}, but batch {t} was completed by epoch "
            f"{first_completed[t]} only"
        )
        expected = sum(counts[answer.word] for b, counts in read.items() if b <= t)
        assert (answer.value or 0) == expected and (answer.value is None) == (expected == 0), (
            f"{answer}: the reference total as of batch {t} is {expected}"
        )
        report.answers += 1
        report.absent += answer.value is None
        report.epochs[epoch] += 1
        report.batches.add(t)
    return report
