"""One root exception for the project, with a subclass per kind of failure.

Messages say what was expected, what was found, and what to do about it.
"""

from __future__ import annotations


class DStreamsError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(DStreamsError):
    """The configuration is invalid; raised at start-up, before any work."""


class JournalError(DStreamsError):
    """The master-state journal cannot be used as it is."""


class JournalCorrupt(JournalError):
    """A journal record in the middle of the journal fails its checksum or cannot be parsed."""


class FencedOut(JournalError):
    """A newer driver holds a higher epoch; this driver must stop at once."""


class OffsetGap(DStreamsError):
    """Journaled offset ranges are not contiguous (a gap or an overlap between batches)."""


class DataLoss(DStreamsError):
    """Offsets that a batch needs were deleted by retention before they were read."""


class GraphChanged(DStreamsError):
    """The job's graph differs from the one that wrote the journal."""


class SinkError(DStreamsError):
    """A sink could not write or commit a batch."""


class SinkUnavailable(SinkError):
    """A sink's server stayed unreachable longer than the sink's outage limit."""


class DiskFull(DStreamsError):
    """A volume the service writes to (journal, checkpoints, files sink) has no space left."""


class PartitionInputCut(DStreamsError):
    """Spark cut a task's input short while killing the task; the task fails unwritten."""


class JournalDiskFull(DiskFull, JournalError):
    """The file journal's volume is full: the append was not journaled, nor will later ones."""


class ClusterError(DStreamsError):
    """The Spark cluster cannot run the job: no executor came, or executors lack its code."""


class ReplicationInsufficient(DStreamsError):
    """A topic is replicated less than `kafka.require_replication` demands; start-up refused."""


class IngestError(DStreamsError):
    """The ingest endpoint cannot serve: a source has no single topic, or its producer failed."""
