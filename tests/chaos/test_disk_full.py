"""A full volume under the file journal, the checkpoint store and the files sink.

Each test mounts a small tmpfs of its own (as root: `mount -t tmpfs -o size=...`, unmounted at
teardown; skipped with the reason when not root), fills it with a filler file, and checks:

- the write stops with one `DiskFull` naming the path and what was being written;
- nothing is corrupt: the journal reads back every record appended before, with no torn tail;
  a checkpoint partition or a sink part is either complete under its name or absent;
- no temporary file is left behind, however often the write is retried (a Spark task's retries);
- once the filler is deleted, the same writes succeed and read back exact.

The last test does it to a running service (journal and files sink on the volume): exit 5 with
one line naming the path, then a restart after space is freed is exact in every sink.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from connectors.offsets import OffsetRange
from service.errors import DiskFull
from service.graph.checkpoint_files import LocalFiles
from service.graph.checkpoint_store import part_name, read_partition, write_partition
from service.journal.base import JournalState
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, PlannedRecord
from sinks.base import BatchKey
from sinks.files import FileSink
from tests.chaos.conftest import ChaosApp, Feeder, chaos_seed, log_text, make_lines, word_totals

# Room for a few batches of the service's journal, files and checkpoints (tmpfs gives every file
# at least a page), so that only the filler fills it.
VOLUME_BYTES = 8 << 20
FILLER = "filler"
RETRIES = 4  # as many attempts as a Spark task gets in the chaos app (local[2,4])


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of this test's own, unmounted at teardown."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root; running as uid {os.geteuid()}")
    mount = tmp_path / "volume"
    mount.mkdir()
    options = f"size={VOLUME_BYTES},mode=0777"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)  # noqa: S607 - mount(8) from PATH
    # Created while there is room: a full tmpfs may refuse even an empty new file.
    (mount / FILLER).touch()
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)  # noqa: S607 - umount(8) from PATH


def fill(volume: Path, leave: int = 0) -> Path:
    """A filler file taking all of `volume`'s free space but about `leave` bytes."""
    filler = volume / FILLER
    stat = os.statvfs(volume)
    free = stat.f_bavail * stat.f_frsize
    try:
        with filler.open("r+b") as out:
            out.write(b"\0" * max(0, free - leave))
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        # Full, as wanted: the volume had less room left than statvfs said a moment before.
    return filler


def temporary_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(".tmp"))


def planned(epoch: int, t: int) -> PlannedRecord:
    return PlannedRecord(epoch, t, (OffsetRange("t", 0, t, t + 1),), "fp")


def test_a_full_journal_volume_stops_the_append_and_keeps_the_journal_whole(
    volume: Path,
) -> None:
    path = volume / "state" / "journal"
    journal = FileJournal(path)
    epoch = journal.open()
    fill(volume, leave=16 << 10)
    appended = []
    with pytest.raises(DiskFull) as raised:
        for t in range(1, 100_000):
            journal.append(planned(epoch, t * 1000))
            appended.append(t * 1000)
    journal.close()
    assert str(path) in str(raised.value) and "journal record" in str(raised.value)
    assert appended, "the volume filled before a single append"

    (volume / FILLER).unlink()
    reopened = FileJournal(path)
    epoch2 = reopened.open()
    state = JournalState.from_records(reopened.read())
    assert sorted(state.planned) == appended  # every append before, none torn
    reopened.append(CompletedRecord(epoch2, appended[0], {"out": 1}))
    reopened.close()
    assert temporary_files(volume) == []


def test_a_full_files_sink_volume_leaves_no_temporary_file_and_recovers(volume: Path) -> None:
    sink = FileSink(volume / "files")
    sink.setup("app", "out")
    rows = [(f"w{n:05d}", n) for n in range(20_000)]  # ~300 KB a part
    fill(volume, leave=64 << 10)
    key = BatchKey("app", "out", 1000, 0)
    for _ in range(RETRIES):
        with pytest.raises(DiskFull, match="files sink: part 0 of batch 1000 of out"):
            sink.write(key, rows)
    assert temporary_files(volume) == []
    assert not sink.part_path(key).exists()

    (volume / FILLER).unlink()
    assert sink.write(key, rows).rows == len(rows)
    sink.commit("app", "out", 1000, 1)
    assert sorted(tuple(r) for r in sink.read_batch("out", 1000)) == rows
    assert temporary_files(volume) == []


def test_a_full_checkpoint_volume_leaves_no_partial_partition(volume: Path) -> None:
    files = LocalFiles(volume / "checkpoints")
    folder = volume / "checkpoints" / "1000" / "state"
    rows = [(f"k{n:05d}", n) for n in range(20_000)]
    fill(volume, leave=64 << 10)
    for _ in range(RETRIES):
        with pytest.raises(DiskFull, match="checkpoint store: state partition 0"):
            list(write_partition(files, "1000/state", "pairs", 0, iter(rows)))
    assert temporary_files(volume) == []
    assert not (folder / part_name(0)).exists()

    (volume / FILLER).unlink()
    written = list(write_partition(files, "1000/state", "pairs", 0, iter(rows)))
    ((index, records, _size, _sha),) = written
    assert (index, records) == (0, len(rows))
    read = read_partition(files, "1000/state", "pairs", [(0, records)])
    assert [tuple(r) for r in read] == rows


@dataclass
class VolumeApp(ChaosApp):
    """The chaos tier's three-sink app with its journal and files sink on `volume`."""

    volume: Path = Path()

    @property
    def journal_path(self) -> Path:
        return self.volume / "state" / "journal"

    @property
    def files_root(self) -> Path:
        return self.volume / "files"


@pytest.fixture
def volume_app(
    kafka_bootstrap: str, pg_database: str, volume: Path, unique_name: str, tmp_path: Path
) -> Iterator[VolumeApp]:
    suffix = unique_name.rsplit("_", 1)[-1]
    app = VolumeApp(f"diskfull_{suffix}", kafka_bootstrap, pg_database, tmp_path, volume=volume)
    app.create_input()
    try:
        yield app
    finally:
        app.kill_all()


@pytest.mark.timeout(480)
def test_a_service_whose_volume_fills_stops_cleanly_and_restarts_exact(
    volume_app: VolumeApp,
) -> None:
    app = volume_app
    lines = make_lines(chaos_seed(), 6_000)
    _, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, [line.encode() for line in lines], 1_000, 250
    )
    driver = app.service()
    driver.start()
    feeder.start()
    app.wait_completed(driver, batches=3)

    filler = fill(app.volume)
    code = driver.wait(180)
    log = log_text(driver)
    assert code == 5, driver.log_tail()
    stops = [line for line in log.splitlines() if line.startswith("dstreams failed while")]
    assert len(stops) == 1 and f"no space left for {app.volume}" in stops[0], stops
    app.journal_state().validate()  # nothing torn or corrupt in the journal
    assert temporary_files(app.volume) == []

    filler.unlink()
    feeder.finish()
    driver.start()
    app.wait_drained(driver)
    app.stop(driver)
    app.verify(word_totals(lines))
    assert temporary_files(app.volume) == []
