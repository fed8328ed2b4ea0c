"""Static checks of the Dockerfile and .dockerignore (no Docker engine runs in this tier).

What they guard: SIGTERM reaches Python (exec form, no shell as PID 1), the process is not root,
no credential is baked in, the hash seed matches the one Spark's workers use, and the build
context carries only what the image needs.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.driver.spark import HASH_SEED

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped, each tagged by stage."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        pending += " " + line.removesuffix("\\").strip() if pending else line.removesuffix("\\")
        if line.endswith("\\"):
            continue
        keyword, _, args = pending.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
        pending = ""
    return instructions


INSTRUCTIONS = parse(DOCKERFILE.read_text())
FINAL = max(i.stage for i in INSTRUCTIONS)


def final(keyword: str) -> list[Instruction]:
    return [i for i in INSTRUCTIONS if i.stage == FINAL and i.keyword == keyword]


def env_of_final_stage() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in final("ENV"):
        for pair in shlex.split(instruction.args):
            name, _, value = pair.partition("=")
            env[name] = value
    return env


def exec_form(instruction: Instruction) -> list[str]:
    try:
        value = json.loads(instruction.args)
    except json.JSONDecodeError:
        pytest.fail(f"{instruction.keyword} is in shell form: {instruction.args}")
    assert isinstance(value, list), instruction.args
    assert all(isinstance(item, str) for item in value)
    return value


def test_multi_stage_on_python_311_slim_debian() -> None:
    bases = [i.args for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(bases) >= 2
    args = {i.args.partition("=")[0]: i.args.partition("=")[2] for i in INSTRUCTIONS if i.stage < 0}
    image = args.get("PYTHON_IMAGE", "")
    assert re.fullmatch(r"python:3\.11-slim-(bookworm|bullseye)", image), image
    assert all(base.split()[0] in ("${PYTHON_IMAGE}", image) for base in bases)


def test_final_stage_has_java_17_and_copies_the_venv_from_the_builder() -> None:
    runs = " ".join(i.args for i in final("RUN"))
    assert "openjdk-17-jre-headless" in runs
    assert "--no-install-recommends" in runs
    assert "rm -rf /var/lib/apt/lists" in runs
    assert any(i.args.startswith("--from=builder /opt/venv") for i in final("COPY"))
    # pip and the project's source stay in the builder.
    assert "pip install" not in runs


def test_project_installed_without_dev_extras() -> None:
    installs = [i.args for i in INSTRUCTIONS if i.keyword == "RUN" and "pip install" in i.args]
    assert any(re.search(r"pip install (--[\w-]+ )*\.(\s|$)", args) for args in installs), installs
    assert not any("[dev]" in args or "-e " in args for args in installs)


def test_dependencies_can_come_from_a_wheelhouse_in_the_context() -> None:
    # An offline build (service/dev/images.py) sends wheels under wheelhouse/ and PIP_NO_INDEX=1;
    # a plain `docker build .` has no wheelhouse and must still build.
    builder = [i for i in INSTRUCTIONS if i.stage == 0]
    env = " ".join(i.args for i in builder if i.keyword == "ENV")
    assert "PIP_FIND_LINKS=/wheelhouse" in env
    assert any(i.keyword == "ARG" and i.args == "PIP_NO_INDEX" for i in builder)
    (copy,) = [i.args.split() for i in builder if i.keyword == "COPY" and "/wheelhouse/" in i.args]
    optional = [source for source in copy[:-1] if "[" in source]
    required = [source for source in copy[:-1] if "[" not in source]
    assert [fnmatch.fnmatchcase("wheelhouse", pattern) for pattern in optional] == [True]
    assert required, "COPY fails when none of its sources exists"


def test_runtime_packages_are_installed_only_when_the_base_lacks_them() -> None:
    # The local base holds the JRE and tini and builds with no network: apt must not run there.
    (install,) = [i.args for i in final("RUN") if "apt-get install" in i.args]
    assert re.match(r"dpkg -s openjdk-17-jre-headless tini >/dev/null 2>&1\s+\|\| \{", install)


def test_entrypoint_is_exec_form_and_never_a_shell() -> None:
    (entrypoint,) = final("ENTRYPOINT")
    argv = exec_form(entrypoint)
    assert argv[-1] == "dstreams"
    assert not {"sh", "bash", "/bin/sh", "/bin/bash", "-c"} & set(argv)
    if "tini" in argv[0]:
        # tini must forward SIGTERM to dstreams alone: -g would signal the JVM too, mid-batch.
        assert argv[1:] == ["--", "dstreams"]
    (cmd,) = final("CMD")
    assert exec_form(cmd) == ["run", "--config", "/etc/dstreams/config.yaml"]


def test_runs_as_a_fixed_non_root_user_after_all_root_steps() -> None:
    (user,) = final("USER")
    name = user.args.split(":")[0]
    assert name.isdigit(), "a numeric UID lets Kubernetes verify runAsNonRoot"
    assert int(name) >= 10000
    later = INSTRUCTIONS[INSTRUCTIONS.index(user) + 1 :]
    assert not [i for i in later if i.keyword in ("RUN", "COPY", "ADD")]


def test_environment_pins_what_exactly_once_depends_on() -> None:
    env = env_of_final_stage()
    assert env["PYTHONHASHSEED"] == HASH_SEED == "0"
    assert env["PYTHONUNBUFFERED"] == "1"
    # Executor pods run this image too (Spark on Kubernetes) and must bind their pod IP; local
    # mode pins loopback in dstreams itself.
    assert "SPARK_LOCAL_IP" not in env
    assert "/opt/venv/bin" in env["PATH"].split(":")


def test_workdir_port_and_data_files() -> None:
    assert [i.args for i in final("WORKDIR")] == ["/app"]
    assert [i.args for i in final("EXPOSE")] == ["8080"]
    copies = [i.args for i in final("COPY")]
    assert "config/ config/" in copies
    assert "examples/ examples/" in copies


def test_oci_labels() -> None:
    labels = " ".join(i.args for i in final("LABEL"))
    for key in ("title", "description", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_the_image_carries_the_license_its_labels_name() -> None:
    labels = " ".join(i.args for i in final("LABEL"))
    (named,) = re.findall(r'org\.opencontainers\.image\.licenses="([^"]+)"', labels)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == {"text": named}
    text = (ROOT / "LICENSE").read_text()
    assert named == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it
    assert "LICENSE LICENSE" in [i.args for i in final("COPY")]
    assert sent_to_docker("LICENSE")


def test_no_credentials_baked_in() -> None:
    secretive = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|CREDENTIAL|DSN", re.IGNORECASE)
    for instruction in INSTRUCTIONS:
        if instruction.keyword in ("ARG", "ENV", "LABEL"):
            assert not secretive.search(instruction.args), instruction
    text = DOCKERFILE.read_text()
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text), "a URL with user:password"
    assert "--mount=type=secret" not in text  # nothing needs one; review before adding


# --- .dockerignore -------------------------------------------------------------------------


def ignore_rules() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def sent_to_docker(path: str) -> bool:
    """Whether .dockerignore lets `path` into the build context (last matching rule wins)."""
    sent = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for rule in ignore_rules():
        negated = rule.startswith("!")
        pattern = rule.removeprefix("!").rstrip("/")
        if pattern.startswith("**/"):
            matched = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:
            matched = any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes)
        if matched:
            sent = negated
    return sent


def test_dockerignore_denies_by_default() -> None:
    assert ignore_rules()[0] == "*"
    for stray in (".env", ".venv/bin/python", ".git/HEAD", "state/journal/app.journal", "tests"):
        assert not sent_to_docker(stray), stray


def test_dockerignore_sends_everything_the_dockerfile_copies() -> None:
    sources = []
    for instruction in INSTRUCTIONS:
        if instruction.keyword == "COPY" and not instruction.args.startswith("--from"):
            sources += instruction.args.split()[:-1]
    assert sources
    for source in sources:
        # A glob names an optional source (wheelhous[e]): the name it matches must get in.
        literal = re.sub(r"\[(.)\]", r"\1", source)
        assert sent_to_docker(literal.rstrip("/")), source
    assert sent_to_docker("service/cli.py")
    assert not sent_to_docker("service/__pycache__/cli.cpython-311.pyc")


def test_every_package_of_the_tree_is_in_the_distribution() -> None:
    """The image installs the distribution, not the tree: a sub-package missing from the
    explicit list in pyproject.toml would be missing in the container."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("service", "connectors", "sinks")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == listed


# --- Reproducible and lean ---------------------------------------------------------------------


def builder_runs() -> list[str]:
    return [i.args for i in INSTRUCTIONS if i.stage == 0 and i.keyword == "RUN"]


def test_dependencies_come_only_from_the_lock_files_with_their_hashes() -> None:
    # Pinned build tools first (they build pyspark's sdist and the project), then the runtime.
    installs = [args for args in builder_runs() if "pip install" in args]
    commands = [c.strip() for args in installs for c in args.split("&&") if "pip install" in c]
    build, runtime, project = commands
    assert re.fullmatch(
        r"pip install --require-hashes --no-deps -r requirements-build\.lock", build
    )
    assert "--require-hashes" in runtime.split() and "-r requirements.lock" in runtime
    assert "--no-deps" not in runtime.split(), "pip must refuse a dependency the lock misses"
    assert "--no-build-isolation" in runtime.split() and "--no-build-isolation" in project.split()
    assert project.endswith(" ."), project
    assert "pyproject.toml" not in " ".join(installs), "no ranges resolved at build time"
    copies = [i.args for i in INSTRUCTIONS if i.stage == 0 and i.keyword == "COPY"]
    assert "requirements-build.lock requirements.lock ./" in copies
    assert sent_to_docker("requirements.lock") and sent_to_docker("requirements-build.lock")


def test_the_development_tooling_is_deleted_from_the_installed_package() -> None:
    (project,) = [args for args in builder_runs() if re.search(r"pip install .*\s\.(\s|$)", args)]
    # In the venv's site-packages, after the install: not the source tree in the working dir.
    assert 'sysconfig.get_path("purelib") + "/service/dev"' in project
    assert project.index("pip install") < project.index("rmtree")


def test_the_build_tools_leave_the_venv_after_the_project_is_installed() -> None:
    # The runtime venv then holds exactly requirements.lock and the project.
    build_lock = (ROOT / "requirements-build.lock").read_text()
    tools = set(re.findall(r"^([a-z0-9-]+)==", build_lock, re.MULTILINE))
    runtime = set(re.findall(r"^([a-z0-9-]+)==", (ROOT / "requirements.lock").read_text(), re.M))
    assert tools and not tools & runtime
    (project,) = [args for args in builder_runs() if re.search(r"pip install .*\s\.(\s|$)", args)]
    (uninstall,) = [c.strip() for c in project.split("&&") if "pip uninstall" in c]
    assert uninstall.startswith("pip uninstall --yes")
    assert set(uninstall.split()[2:]) - {"--yes", "--quiet"} == tools
    assert project.index("pip install") < project.index("pip uninstall")


def test_the_class_archive_is_built_by_a_command_the_image_keeps() -> None:
    runs = [i.args for i in final("RUN")]
    assert "dstreams class-archive" in runs
    assert not [args for args in runs if "dstreams dev" in args]
