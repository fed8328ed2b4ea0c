"""`OffsetRange`: the unit a batch is made of. Start inclusive, end exclusive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from connectors.json_fields import JsonFields


@dataclass(frozen=True, order=True)
class OffsetRange(JsonFields):
    """Records `[from_offset, until_offset)` of one topic partition.

    >>> r = OffsetRange("clicks", 0, 100, 110)
    >>> r.count, r.topic_partition
    (10, ('clicks', 0))
    >>> [(part.from_offset, part.until_offset) for part in r.split(3)]
    [(100, 104), (104, 107), (107, 110)]
    >>> OffsetRange.from_json(r.to_json()) == r
    True
    >>> OffsetRange("clicks", 0, 110, 100)
    Traceback (most recent call last):
    ...
    ValueError: offset range clicks-0 is invalid: from=110 until=100; expected 0 <= from <= until
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    # The JSON keys of a range's ends, as journals written by every earlier build hold them.
    JSON_KEYS: ClassVar[dict[str, str]] = {"from_offset": "from", "until_offset": "until"}

    def __post_init__(self) -> None:
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            msg = (
                f"offset range {self.topic}-{self.partition} is invalid: "
                f"from={self.from_offset} until={self.until_offset}; "
                "expected 0 <= from <= until"
            )
            raise ValueError(msg)

    @property
    def count(self) -> int:
        """How many offsets the range spans (records may be fewer: gaps, control records)."""
        return self.until_offset - self.from_offset

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def split(self, pieces: int) -> list[OffsetRange]:
        """Cut the range into at most `pieces` contiguous, non-empty parts of near-equal size."""
        pieces = max(1, min(pieces, self.count))
        size, extra = divmod(self.count, pieces)
        parts: list[OffsetRange] = []
        start = self.from_offset
        for index in range(pieces):
            end = start + size + (1 if index < extra else 0)
            parts.append(OffsetRange(self.topic, self.partition, start, end))
            start = end
        return parts


# Offsets a batch skipped, e.g. because retention deleted them before they were read.
Skipped = tuple[OffsetRange, ...]
