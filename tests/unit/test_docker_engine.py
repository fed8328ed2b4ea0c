"""Which Docker engine the tooling uses or starts, and how the private one is run and stopped.

The decisions are pure (`plan_engine`, `start_refusal`); the pid-file check and the lock that
decides the last user run against files in a temp dir. No engine runs in this tier.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from service.dev.docker_engine import (
    DEFAULT_DOCKER_HOST,
    DockerEngine,
    DockerEngineError,
    EngineLayout,
    _last_user,
    _private_engine_pid,
    engine_environment,
    plan_engine,
    start_refusal,
    stop_private_engine,
)

LAYOUT = EngineLayout(data_root=Path("/cache/dstreams/docker"), run_dir=Path("/tmp/dd-0"))
PRIVATE = LAYOUT.docker_host
ELSEWHERE = "tcp://127.0.0.1:2375"


def answering(*hosts: str) -> Callable[[str], bool]:
    """A ping that only `hosts` answer."""
    return lambda host: host in hosts


def test_a_running_default_engine_is_used_as_it_is() -> None:
    plan = plan_engine({}, answering(DEFAULT_DOCKER_HOST, PRIVATE), LAYOUT, None)
    assert (plan.action, plan.docker_host) == ("use", DEFAULT_DOCKER_HOST)


def test_docker_host_names_the_engine_even_when_the_default_answers() -> None:
    environ = {"DOCKER_HOST": ELSEWHERE}
    plan = plan_engine(environ, answering(ELSEWHERE, DEFAULT_DOCKER_HOST), LAYOUT, None)
    assert (plan.action, plan.docker_host) == ("use", ELSEWHERE)


def test_a_silent_docker_host_is_an_error_not_replaced_by_another_engine() -> None:
    with pytest.raises(DockerEngineError, match="named by DOCKER_HOST=tcp://127.0.0.1:2375"):
        plan_engine({"DOCKER_HOST": ELSEWHERE}, answering(DEFAULT_DOCKER_HOST), LAYOUT, None)


def test_the_private_engine_is_joined_when_it_already_runs() -> None:
    plan = plan_engine({}, answering(PRIVATE), LAYOUT, "not root")
    assert (plan.action, plan.docker_host) == ("join", PRIVATE)


def test_the_private_engine_is_started_when_none_answers_and_we_may() -> None:
    plan = plan_engine({}, answering(), LAYOUT, None)
    assert (plan.action, plan.docker_host) == ("start", PRIVATE)


def test_a_docker_host_left_pointing_at_the_private_socket_starts_it_again() -> None:
    # An outer session exported it and has ended: the socket is ours, so we may start it.
    plan = plan_engine({"DOCKER_HOST": PRIVATE}, answering(DEFAULT_DOCKER_HOST), LAYOUT, None)
    assert (plan.action, plan.docker_host) == ("start", PRIVATE)


def test_when_none_answers_and_we_may_not_start_the_reason_is_given() -> None:
    with pytest.raises(DockerEngineError, match="none can be started here: starting dockerd"):
        plan_engine({}, answering(), LAYOUT, "starting dockerd needs root")


@pytest.mark.parametrize(
    ("environ", "euid", "dockerd", "reason"),
    [
        ({"DSTREAMS_DOCKER_START": "never"}, 0, "/usr/sbin/dockerd", "forbids it"),
        ({}, 1000, "/usr/sbin/dockerd", "needs root"),
        ({}, 0, None, "no `dockerd` on PATH"),
    ],
)
def test_start_refusals(
    environ: dict[str, str], euid: int, dockerd: str | None, reason: str
) -> None:
    refusal = start_refusal(environ, euid, dockerd)
    assert refusal is not None
    assert reason in refusal


def test_root_with_dockerd_may_start_one() -> None:
    assert start_refusal({}, 0, "/usr/sbin/dockerd") is None


def test_the_private_engine_keeps_its_files_in_its_layout_and_traffic_on_this_machine() -> None:
    argv = LAYOUT.dockerd_argv("/usr/sbin/dockerd")
    assert argv[0] == "/usr/sbin/dockerd"
    assert "--data-root=/cache/dstreams/docker" in argv
    assert "--exec-root=/tmp/dd-0/exec" in argv
    assert "--pidfile=/tmp/dd-0/dockerd.pid" in argv
    assert "--config-file=/tmp/dd-0/daemon.json" in argv
    assert [a for a in argv if a.startswith(("--host", "-H"))] == [
        "--host=unix:///tmp/dd-0/docker.sock"
    ]
    # Published ports on loopback only; no forwarding or NAT to addresses beyond the host.
    for flag in ("--ip=127.0.0.1", "--ip-forward=false", "--ip-masq=false", "--iptables=false"):
        assert flag in argv


def test_the_default_layout_caches_images_and_keeps_sockets_short() -> None:
    layout = EngineLayout.default({"XDG_CACHE_HOME": "/home/dev/.cache"})
    assert layout.data_root == Path("/home/dev/.cache/dstreams/docker")
    assert layout.run_dir.name == f"dstreams-docker-{os.geteuid()}"
    assert len(str(layout.exec_root / "containerd" / "containerd.sock")) < 100


def test_only_the_private_engine_turns_off_the_reaper_and_registry_credentials() -> None:
    used = DockerEngine(DEFAULT_DOCKER_HOST)
    assert used.environment() == {"DOCKER_HOST": DEFAULT_DOCKER_HOST}
    private = DockerEngine(PRIVATE, private_dir=Path("/tmp/dd-0"))
    assert private.environment() == {
        "DOCKER_HOST": PRIVATE,
        "DOCKER_CONFIG": "/tmp/dd-0/client-config",
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        "TC_HOST": "127.0.0.1",
        "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
    }


def test_engine_environment_restores_what_was_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    monkeypatch.delenv("TC_HOST", raising=False)
    with engine_environment(DockerEngine(PRIVATE, private_dir=Path("/tmp/dd-0"))):
        assert os.environ["DOCKER_HOST"] == PRIVATE
        assert os.environ["TC_HOST"] == "127.0.0.1"
    assert os.environ["DOCKER_HOST"] == "unix:///elsewhere.sock"
    assert "TC_HOST" not in os.environ


def test_a_pid_file_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    layout = EngineLayout(data_root=tmp_path / "data", run_dir=tmp_path)
    layout.pidfile.write_text(f"{os.getpid()}\n")  # this test process: no --pidfile flag
    assert _private_engine_pid(layout) is None
    stop_private_engine(layout)  # must not signal us
    layout.pidfile.write_text("not a pid\n")
    assert _private_engine_pid(layout) is None


def test_only_the_last_session_holding_the_engine_stops_it(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "users.lock"
    first, second = lock.open("a"), lock.open("a")
    try:
        fcntl.flock(first, fcntl.LOCK_SH)
        fcntl.flock(second, fcntl.LOCK_SH)
        assert not _last_user(first), "another session still holds the engine"
        second.close()
        assert _last_user(first)
    finally:
        first.close()
        second.close()
