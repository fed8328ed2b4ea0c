"""Which topics fall short of the required replication, and what the messages tell people to do."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.replication import (
    Replication,
    TopicUse,
    enforce,
    shortfalls,
    unique,
)
from service.errors import ReplicationInsufficient

WANTED = Replication(factor=3, min_insync=2)
BOOTSTRAP = "b0:9092"


def short(uses: list[TopicUse], found: dict[str, Replication], default_isr: int = 2) -> list[str]:
    return [s.message for s in shortfalls(uses, found, WANTED, default_isr, BOOTSTRAP)]


def test_topics_at_or_above_the_minimum_pass() -> None:
    uses = [TopicUse("in", "input"), TopicUse("out", "output", creates_with=3)]
    found = {"in": Replication(3, 2), "out": Replication(5, 3)}
    assert short(uses, found) == []


def test_an_existing_rf1_topic_names_itself_and_the_reassignment_command() -> None:
    (message,) = short([TopicUse("in", "input", "source lines")], {"in": Replication(1, 1)})
    assert "topic 'in' (input of source lines) has replication factor 1" in message
    assert f"kafka-reassign-partitions.sh --bootstrap-server {BOOTSTRAP}" in message
    assert (
        f"kafka-configs.sh --bootstrap-server {BOOTSTRAP} --alter --entity-type topics "
        "--entity-name in --add-config min.insync.replicas=2" in message
    )


def test_a_low_min_insync_alone_asks_only_for_the_config_change() -> None:
    (message,) = short([TopicUse("in", "input")], {"in": Replication(3, 1)})
    assert "min.insync.replicas 1" in message
    assert "kafka-configs.sh" in message and "reassign" not in message


def test_a_topic_to_be_created_is_judged_by_its_setting() -> None:
    use = TopicUse("out", "output", "output counts", creates_with=1, setting="sinks.counts")
    (message,) = short([use], {}, default_isr=2)
    assert "does not exist yet and would be created with replication factor 1" in message
    assert "set sinks.counts.replication_factor: 3" in message


def test_a_created_topic_inherits_the_brokers_min_insync() -> None:
    use = TopicUse("out", "output", creates_with=3, setting="sinks.counts")
    assert short([use], {}, default_isr=2) == []
    (message,) = short([use], {}, default_isr=1)
    assert "min.insync.replicas 1" in message and "once it exists" in message


def test_the_journal_topic_names_both_of_its_settings() -> None:
    use = TopicUse("j", "journal", creates_with=1, creates_min_insync=1, setting="journal")
    (message,) = short([use], {})
    assert "set journal.replication_factor: 3" in message
    assert "set journal.min_insync_replicas: 2" in message


def test_missing_topics_the_process_never_creates_are_not_judged() -> None:
    assert short([TopicUse("in", "input")], {}) == []


def test_unique_keeps_the_first_use_of_each_topic() -> None:
    uses = [TopicUse("dl", "dead-letters", "output a"), TopicUse("dl", "dead-letters", "output b")]
    assert unique(uses) == [uses[0]]


class Admin:
    """What `enforce` asks of an AdminClient, answered from a table (or failing)."""

    def __init__(
        self,
        factors: dict[str, int],
        isr: dict[str, int],
        fail: bool = False,
        config_errors: list[int] | None = None,
    ) -> None:
        self.factors, self.isr, self.fail = factors, isr, fail
        self.config_errors = list(config_errors or [])
        """The error of each next DescribeConfigs, before they answer."""
        self.calls: list[str] = []

    def list_topics(self, timeout: float) -> Any:
        self.calls.append("metadata")
        if self.fail:
            msg = "brokers down"
            raise RuntimeError(msg)
        from types import SimpleNamespace as NS

        topics = {
            name: NS(error=None, partitions={0: NS(leader=0, replicas=[*range(rf)], isrs=[0])})
            for name, rf in self.factors.items()
        }
        return NS(topics=topics, brokers={1: None})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> Any:
        from concurrent.futures import Future
        from types import SimpleNamespace as NS

        self.calls.append("configs")
        error = self.config_errors.pop(0) if self.config_errors else None
        answers = {}
        for resource in resources:
            future: Future[Any] = Future()
            if error is not None:
                future.set_exception(KafkaException(KafkaError(error)))
            else:
                value = self.isr.get(resource.name, 2)
                future.set_result({"min.insync.replicas": NS(value=str(value))})
            answers[resource] = future
        return answers


def test_enforce_refuses_when_required_and_reports_each_topic() -> None:
    admin = Admin({"in": 1, "ok": 3}, {"in": 1, "ok": 2})
    reported: list[tuple[str, str, bool]] = []
    uses = [TopicUse("in", "input"), TopicUse("ok", "input")]
    with pytest.raises(ReplicationInsufficient, match="'in'"):
        enforce(admin, lambda _: uses, WANTED, required=True, bootstrap=BOOTSTRAP,
                report=lambda *r: reported.append(r))  # fmt: skip
    assert sorted(reported) == [("in", "input", True), ("ok", "input", False)]


def test_enforce_warns_when_not_required(caplog: pytest.LogCaptureFixture) -> None:
    admin = Admin({"in": 1}, {"in": 1})
    found = enforce(admin, lambda _: [TopicUse("in", "input")], WANTED, required=False,
                    bootstrap=BOOTSTRAP, report=lambda *r: None)  # fmt: skip
    assert [s.use.topic for s in found] == ["in"]
    assert "under-replicated: topic 'in'" in caplog.text


def test_an_unreachable_cluster_refuses_only_when_required() -> None:
    admin = Admin({}, {}, fail=True)
    uses = [TopicUse("in", "input")]
    with pytest.raises(ReplicationInsufficient, match="could not describe"):
        enforce(admin, lambda _: uses, WANTED, required=True, bootstrap=BOOTSTRAP,
                report=lambda *r: None)  # fmt: skip
    assert enforce(admin, lambda _: uses, WANTED, required=False, bootstrap=BOOTSTRAP,
                   report=lambda *r: None) == []  # fmt: skip


def test_a_controller_that_does_not_answer_is_asked_again_after_fresh_metadata() -> None:
    # librdkafka sends topic DescribeConfigs to the controller its metadata names; one that has
    # just died times the try out, and the metadata asked for next names a live one.
    timed_out = KafkaError._TIMED_OUT  # noqa: SLF001
    admin = Admin({"in": 3}, {"in": 2}, config_errors=[timed_out, timed_out])
    found = enforce(admin, lambda _: [TopicUse("in", "input")], WANTED, required=True,
                    bootstrap=BOOTSTRAP, report=lambda *r: None)  # fmt: skip
    assert found == []
    assert admin.calls == ["metadata", "configs", "metadata", "configs", "metadata", "configs"]


def test_a_refusal_to_describe_configurations_is_not_asked_again() -> None:
    refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = Admin({"in": 3}, {"in": 2}, config_errors=[refused])
    with pytest.raises(ReplicationInsufficient, match="could not describe"):
        enforce(admin, lambda _: [TopicUse("in", "input")], WANTED, required=True,
                bootstrap=BOOTSTRAP, report=lambda *r: None)  # fmt: skip
    assert admin.calls == ["metadata", "configs"]
