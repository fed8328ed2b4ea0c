"""The driver's journal (`journal`): a file or a Kafka topic, one model each of a union on `type`
(a journal given without `type` is a file journal); each builds its journal with `build(...)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from service.config.kafka import KafkaSettings, require_min_insync_within
from service.config.model import ConfigModel
from service.config.types import TopicName

if TYPE_CHECKING:
    # Built objects only: importing them at run time would load Kafka clients into every
    # process that merely reads its configuration.
    from service.journal.file import FileJournal
    from service.journal.kafka import KafkaJournal


class FileJournalSettings(ConfigModel):
    type: Literal["file"] = "file"
    path: str = Field(default="state/journal", min_length=1)
    """Directory of the file journal (a persistent volume in Kubernetes)."""

    def build(self, app_id: str, kafka: KafkaSettings) -> FileJournal:
        from service.journal.file import FileJournal

        return FileJournal(Path(self.path))


class KafkaJournalSettings(ConfigModel):
    type: Literal["kafka"]
    topic: TopicName
    """Single-partition topic of the kafka journal."""
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int = Field(default=1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _needs_topic(cls, data: object) -> object:
        # Said in the words of the choice made: a bare "topic: required" would not say why.
        if isinstance(data, Mapping) and data.get("topic") is None:
            msg = "topic is required when type is kafka"
            raise ValueError(msg)
        return data

    @model_validator(mode="after")
    def _writable(self) -> KafkaJournalSettings:
        require_min_insync_within(self, "replication_factor", "no write could ever succeed")
        return self

    def build(self, app_id: str, kafka: KafkaSettings) -> KafkaJournal:
        from service.journal.kafka import KafkaJournal

        return KafkaJournal(
            kafka.librdkafka_config(),
            self.topic,
            app_id,
            self.replication_factor,
            self.min_insync_replicas,
        )


def _file_unless_typed(value: object) -> object:
    """A journal given without `type` is a file journal, as it always was."""
    if isinstance(value, Mapping) and "type" not in value:
        return {"type": "file", **value}
    return value


JournalSettings = Annotated[
    Annotated[FileJournalSettings | KafkaJournalSettings, Field(discriminator="type")],
    BeforeValidator(_file_unless_typed),
]
"""The driver's journal; every member has `build(app_id, kafka)`."""
