"""File journal: one append-only file of checksummed records, on a local disk or a mounted volume.

Each record is framed as ``[4-byte length][4-byte CRC32 of the body][body]`` (big-endian, body is
the record's UTF-8 JSON). How an append is made safe:

1. Take an exclusive `flock` on the sibling ``<name>.lock`` file. It is held only for steps 2-4,
   not for the driver's lifetime, so a new driver can always take over from a hung one; and it
   lives in its own file because compaction replaces the journal file (and a lock with it).
2. Catch up: read whatever was appended since this writer last looked. An epoch record newer than
   ours means another driver took over: raise `FencedOut`. Bytes of a writer that died mid-append
   (a torn record) are truncated away, so the new record follows a good one.
3. Write the frame and `fdatasync` it (flushes the data and the new file size) before returning.
4. Past a size threshold, compact: rewrite the needed records to a temporary file, fsync it,
   rename it over the journal and fsync the directory.

On read, a bad frame at the tail is a torn append and is dropped; a bad frame followed by any valid
frame is corruption in the middle and raises `JournalCorrupt` naming the file and byte offset.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from service.durable import disk_full, fsync_directory, replace_durably
from service.errors import FencedOut, JournalCorrupt, JournalDiskFull, JournalError
from service.journal.base import WritingJournal, compact, replay
from service.journal.records import (
    AnyRecord,
    EpochRecord,
    JournalRecord,
    decode_bytes,
    encode_bytes,
)

log = logging.getLogger(__name__)

HEADER = struct.Struct(">II")
# A record is one batch's ranges: far below this. Anything larger is a damaged length field.
MAX_RECORD_BYTES = 64 << 20
# Every body starts with this (see records._header); used to find valid frames after a bad one.
_BODY_PREFIX = b'{"v":'
DEFAULT_COMPACT_BYTES = 4 << 20
# A healthy holder keeps the lock for one write + fsync (milliseconds); far longer means a writer
# is stuck on its disk, and the driver should fail loudly rather than hang.
LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Scan:
    """The result of reading frames: records with their byte offsets, and where good data ends."""

    records: list[tuple[int, AnyRecord]]
    good_end: int
    torn_bytes: int


def encode_frame(record: AnyRecord) -> bytes:
    body = encode_bytes(record)
    return HEADER.pack(len(body), zlib.crc32(body)) + body


def scan_frames(data: bytes, path: Path, base: int = 0) -> Scan:
    """Decode the frames in `data`, which starts at byte `base` of `path`."""
    records: list[tuple[int, AnyRecord]] = []
    pos = 0
    while pos < len(data):
        body = _frame_body(data, pos)
        if body is None:
            _refuse_if_not_tail(data, pos, path, base)
            return Scan(records, base + pos, len(data) - pos)
        records.append((base + pos, _decode_at(body, path, base + pos)))
        pos += HEADER.size + len(body)
    return Scan(records, base + pos, 0)


def _frame_body(data: bytes, pos: int) -> bytes | None:
    """The body of the frame at `pos`, or None if no complete, checksummed frame starts there."""
    if len(data) - pos < HEADER.size:
        return None
    length, crc = HEADER.unpack_from(data, pos)
    end = pos + HEADER.size + length
    if length == 0 or length > MAX_RECORD_BYTES or end > len(data):
        return None
    body = data[pos + HEADER.size : end]
    return body if zlib.crc32(body) == crc else None


def _refuse_if_not_tail(data: bytes, pos: int, path: Path, base: int) -> None:
    # One append is in flight at a time and each completed one is fsynced, so a crash can damage
    # only the last frame. A valid frame anywhere after a bad one means the damage is elsewhere.
    hit = data.find(_BODY_PREFIX, pos + HEADER.size + 1)
    while hit != -1:
        start = hit - HEADER.size
        if start > pos and _frame_body(data, start) is not None:
            msg = (
                f"journal {path} is corrupt at byte {base + pos}: the record there fails its "
                f"length/CRC check but a valid record follows at byte {base + start}; expected "
                "damage only in the last record (a torn append). The file was damaged on disk "
                "or edited. Keep a copy of it, then restore the journal from a backup, or start "
                "with a new journal and explicit starting offsets."
            )
            raise JournalCorrupt(msg)
        hit = data.find(_BODY_PREFIX, hit + 1)


def _decode_at(body: bytes, path: Path, offset: int) -> AnyRecord:
    try:
        return decode_bytes(body)
    except JournalError as exc:
        # Same class (corrupt vs. unknown version), with the location a person needs to act.
        msg = f"journal {path}, record at byte {offset}: {exc}"
        raise type(exc)(msg) from exc


class FileJournal(WritingJournal):
    """The journal in one file; see the module docstring for the format and the append steps."""

    def __init__(
        self,
        path: Path,
        *,
        owner: str | None = None,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
    ) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._compact_bytes = compact_bytes
        self._compact_at = compact_bytes
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._end = 0
        self._ino = 0

    def open(self) -> int:
        if self._lock_fd is not None:
            msg = f"journal {self.path} is already open by this object (epoch {self._epoch})"
            raise JournalError(msg)
        if not self.path.parent.is_dir():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fsync_directory(self.path.parent.parent)
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with self._locked():
                self._reopen()
                records = self._catch_up_from(0)
                epoch = 1 + max((r.epoch for r in records), default=0)
                self._epoch = epoch
                self._write(EpochRecord(epoch, time.time_ns() // 1_000_000, self.owner))
        except BaseException:
            self.close()
            raise
        return epoch

    def append(self, record: JournalRecord) -> None:
        self._require_writable(record)
        with self._locked():
            self._catch_up()
            self._write(record)
            if self._end > self._compact_at:
                self._compact()

    def read(self) -> list[JournalRecord]:
        # No lock: an append in progress looks like a torn tail and is rightly left out.
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return replay(record for _, record in scan_frames(data, self.path).records)

    def close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._lock_fd = None

    def __enter__(self) -> FileJournal:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- steps of an append -------------------------------------------------------------------

    def _require_writable(self, record: JournalRecord) -> None:
        if self._fd is None or self._epoch is None:
            msg = f"journal {self.path} is not open for writing; call open() first"
            raise JournalError(msg)
        self._refuse_if_broken(f"journal {self.path}", "write", "the file's")
        if record.epoch != self._epoch:
            msg = (
                f"record of epoch {record.epoch} cannot be appended to journal {self.path}, "
                f"which this driver holds at epoch {self._epoch}; build records with the epoch "
                "returned by open()"
            )
            raise JournalError(msg)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock_fd = self._require(self._lock_fd)
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = (
                        f"journal lock {self.lock_path} was held by another process for more "
                        f"than {LOCK_TIMEOUT_S:.0f}s; expected a holder to keep it for one write. "
                        "Find the stuck driver (e.g. `fuser` on the lock file) and stop it"
                    )
                    raise JournalError(msg) from None
                time.sleep(0.005)
        try:
            yield
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)

    def _require(self, fd: int | None) -> int:
        if fd is None:
            msg = f"journal {self.path} is closed; call open() first"
            raise JournalError(msg)
        return fd

    def _reopen(self) -> None:
        """Open the file now at `path` (creating it durably if missing) for appending."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            fsync_directory(self.path.parent)
        self._ino = os.fstat(self._fd).st_ino

    def _catch_up(self) -> None:
        """Read what others appended since our last look; raise FencedOut if a newer epoch did."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            msg = f"journal {self.path} was deleted while this driver (epoch {self._epoch}) ran"
            raise JournalError(msg) from None
        if st.st_ino != self._ino:
            # Replaced by a compaction: only a writer that already fenced us compacts after us.
            self._reopen()
            self._catch_up_from(0)
            self._require_own_epoch_present()
        elif st.st_size < self._end:
            msg = (
                f"journal {self.path} shrank from {self._end} to {st.st_size} bytes while this "
                f"driver (epoch {self._epoch}) held it; another process truncated it. Stop every "
                "driver of this job and check the journal with `dstreams journal verify`"
            )
            raise JournalError(msg)
        elif st.st_size > self._end:
            self._catch_up_from(self._end)

    def _catch_up_from(self, start: int) -> list[JournalRecord]:
        """Scan from byte `start` to the end, fence-check, and cut off a torn tail."""
        fd = self._require(self._fd)
        size = os.fstat(fd).st_size
        scan = scan_frames(os.pread(fd, size - start, start), self.path, start)
        records = [r for _, r in scan.records]
        self._raise_if_fenced(records)
        if scan.torn_bytes:
            # We hold the lock, so nobody is mid-append: these bytes are a dead writer's.
            log.warning(
                "journal %s: dropping a torn record of %d bytes at byte %d (an append that "
                "never completed)",
                self.path,
                scan.torn_bytes,
                scan.good_end,
            )
            os.ftruncate(fd, scan.good_end)
            os.fdatasync(fd)
        self._end = scan.good_end
        return replay(records)

    def _raise_if_fenced(self, records: list[AnyRecord]) -> None:
        if self._epoch is None:
            return
        newer = [r for r in records if isinstance(r, EpochRecord) and r.epoch > self._epoch]
        if newer:
            msg = (
                f"journal {self.path}: this driver holds epoch {self._epoch}, but epoch "
                f"{newer[-1].epoch} was opened by {newer[-1].owner!r}; a newer driver has taken "
                "over and this one must stop now. If that was not intended, make sure only one "
                "driver runs per journal."
            )
            raise FencedOut(msg)

    def _require_own_epoch_present(self) -> None:
        records = self.read()
        if max((r.epoch for r in records), default=0) < (self._epoch or 0):
            msg = (
                f"journal {self.path} was replaced by a file that does not contain this driver's "
                f"epoch {self._epoch}; another process rewrote it. Stop every driver of this job "
                "and check the journal with `dstreams journal verify`"
            )
            raise JournalError(msg)

    def _write(self, record: AnyRecord) -> None:
        fd = self._require(self._fd)
        frame = encode_frame(record)
        try:
            _write_all(fd, frame)
            # fdatasync also flushes the file size, which is all the metadata a read needs.
            os.fdatasync(fd)
        except OSError as exc:
            self._broken = repr(exc)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._end)  # no torn record is left to corrupt a later append
            full = disk_full(self.path, "appending a journal record, not journaled", exc)
            if full is not None:
                msg = f"{full}; this journal object refuses further appends"
                raise JournalDiskFull(msg) from exc
            msg = (
                f"could not append to journal {self.path}: {exc}; the record is not journaled "
                "and this journal object refuses further appends. Check free space and "
                "permissions of the volume, then restart the driver"
            )
            raise JournalError(msg) from exc
        self._end += len(frame)

    def _compact(self) -> None:
        """Rewrite the file with only the records still needed; the append before it stands."""
        # A fixed name: the journal lock lets one compaction run at a time, and the next one
        # overwrites what a crashed one left.
        tmp = self.path.with_name(self.path.name + ".compact")
        try:
            records = compact(self._catch_up_from(0))
            replace_durably(self.path, b"".join(encode_frame(r) for r in records), temp=tmp)
        except OSError as exc:
            log.warning("journal %s: compaction failed, will retry later: %r", self.path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
        try:
            self._reopen()
            self._catch_up_from(0)
        except OSError as exc:
            self._broken = repr(exc)
            raise
        self._compact_at = max(self._compact_bytes, 2 * self._end)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
