"""Warm standby's election on the file journal (an OS lock), and the settings that turn it on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from service.cli.main import cli
from service.config.settings import Settings
from service.driver.election import FileLockElection, group_id, make_election
from service.journal.file import FileJournal


def stop_after(calls: int, stopping: threading.Event) -> tuple[list[int], Callable[[], None]]:
    """A `waiting` callback that asks the wait to stop after `calls` polls, and its count."""
    seen = [0]

    def waiting() -> None:
        seen[0] += 1
        if seen[0] >= calls:
            stopping.set()

    return seen, waiting


def settings(**extra: Any) -> Settings:
    document = {"app_id": "app", "job": "examples.wordcount:build"}
    return Settings.model_validate({**document, "kafka": {"bootstrap_servers": "b:9092"}, **extra})


def test_the_second_driver_waits_until_the_first_lets_go(tmp_path: Path) -> None:
    lock = tmp_path / "state" / "journal.leader"
    active, standby = FileLockElection(lock), FileLockElection(lock)
    never = threading.Event()
    assert active.wait_until_elected(never, lambda: None)

    stopping = threading.Event()
    seen, waiting = stop_after(3, stopping)
    assert not standby.wait_until_elected(stopping, waiting)  # still held: waits, then stops
    assert seen[0] == 3

    active.close()  # what the kernel does when the active driver dies
    assert standby.wait_until_elected(never, lambda: None)
    standby.close()


def test_a_file_journal_elects_by_a_lock_beside_it(tmp_path: Path) -> None:
    election = make_election(settings(), FileJournal(tmp_path / "journal"))
    assert isinstance(election, FileLockElection)
    assert election.path == tmp_path / "journal.leader"
    assert group_id("app") == "dstreams-driver-app"


def test_standby_is_off_unless_asked() -> None:
    assert settings().standby.enabled is False
    configured = settings(standby={"enabled": True, "session_timeout_ms": "2s"})
    assert configured.standby.enabled is True
    assert configured.standby.session_timeout_ms == 2_000


def test_run_documents_the_standby_flag() -> None:
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert result.exit_code == 0
    assert "--standby" in result.output
