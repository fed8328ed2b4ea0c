"""`dstreams init`: the project it writes, and its refusals (exit codes in its help)."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from service import __version__
from service.cli.init import EXIT_BAD_NAME, EXIT_EXISTS, init
from service.config.settings import Settings

EXPECTED_FILES = {
    "clicks_job.py",
    "job.yaml",
    "tests/test_clicks_job.py",
    "pyproject.toml",
    "Dockerfile",
    ".dockerignore",
    "README.md",
}


def created(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_writes_a_job_its_config_its_test_and_its_image(tmp_path: Path) -> None:
    project = tmp_path / "clicks"

    result = CliRunner().invoke(init, [str(project)])

    assert result.exit_code == 0, result.output
    assert created(project) == EXPECTED_FILES
    settings = Settings.model_validate(yaml.safe_load((project / "job.yaml").read_text()))
    assert (settings.app_id, settings.job) == ("clicks", "clicks_job:build")
    assert list(settings.sources) == ["lines"] and list(settings.sinks) == ["counts"]
    for module in ("clicks_job.py", "tests/test_clicks_job.py"):
        compile((project / module).read_text(), module, "exec")
    dockerfile = (project / "Dockerfile").read_text()
    assert f"ARG DSTREAMS_IMAGE=dstreams:{__version__}\nFROM ${{DSTREAMS_IMAGE}}" in dockerfile
    assert "COPY clicks_job.py /app/" in dockerfile


def test_a_dash_in_the_name_becomes_an_underscore_in_the_module(tmp_path: Path) -> None:
    result = CliRunner().invoke(init, [str(tmp_path / "Page-Views")])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "Page-Views" / "page_views_job.py").is_file()
    config = yaml.safe_load((tmp_path / "Page-Views" / "job.yaml").read_text())
    assert config["job"] == "page_views_job:build"


def test_refuses_a_folder_that_exists_and_writes_nothing(tmp_path: Path) -> None:
    project = tmp_path / "clicks"
    project.mkdir()
    (project / "job.yaml").write_text("mine\n")

    result = CliRunner().invoke(init, [str(project)])

    assert result.exit_code == EXIT_EXISTS
    assert "exists already" in result.output
    assert created(project) == {"job.yaml"}
    assert (project / "job.yaml").read_text() == "mine\n"


def test_refuses_a_name_that_cannot_be_a_module(tmp_path: Path) -> None:
    result = CliRunner().invoke(init, [str(tmp_path / "2fast")])

    assert result.exit_code == EXIT_BAD_NAME
    assert "is not a project name" in result.output
    assert not (tmp_path / "2fast").exists()


def test_the_derived_image_puts_the_job_where_the_image_and_chart_look(tmp_path: Path) -> None:
    """The Dockerfile it writes copies the job to /app and the config to the path the chart
    mounts: both must still be where the dstreams image and the chart have them."""
    root = Path(__file__).resolve().parents[2]
    image = (root / "Dockerfile").read_text()
    deployment = (root / "helm/dstreams/templates/deployment.yaml").read_text()
    # The driver's volumes are written by a helper the driver, standby and hook share.
    helpers = (root / "helm/dstreams/templates/_helpers.tpl").read_text()
    assert "WORKDIR /app" in image and "PYTHONPATH=/app" in image
    assert 'CMD ["run", "--config", "/etc/dstreams/config.yaml"]' in image
    assert 'args: ["run", "--config", "/etc/dstreams/config.yaml"' in deployment
    assert "mountPath: /etc/dstreams\n" in helpers

    CliRunner().invoke(init, [str(tmp_path / "clicks")])

    derived = (tmp_path / "clicks" / "Dockerfile").read_text()
    assert "COPY clicks_job.py /app/\n" in derived
    assert "COPY job.yaml /etc/dstreams/config.yaml\n" in derived
