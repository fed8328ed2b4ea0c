"""`devtools/ensure-helm.sh` leaves nothing behind in the work tree (`make sysdeps` runs it).

The script runs for real from a copy of the repository's layout, with its tools cache in a
temporary directory and stubs ahead of PATH for what would take minutes or the network: `go`
reports the pinned modules as already built, `helm` answers with the pinned version, and
`python3` stands in for the schema download and layout. Every line of the script itself runs,
so a stray redirect or a misspelt command that writes into the repository is caught.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("devtools") / "ensure-helm.sh"
PINNED = "v9.9.9"  # the stubs' answer for every pin, so no rebuild is ever wanted
KUBE_VERSION = "1.34.0"

GO_STUB = f"""#!/bin/sh
# `go version -m BINARY`: build info naming both pinned modules, then (as a real binary's has)
# more lines than a pipe holds, which a reader that stops at its match never takes.
# `go install` must not happen.
if [ "$1" = version ]; then
  printf '\\tmod\\thelm.sh/helm/v3\\t{PINNED}\\th1:x=\\n'
  printf '\\tmod\\tgithub.com/yannh/kubeconform\\t{PINNED}\\th1:x=\\n'
  i=0
  while [ $i -lt 1500 ]; do
    printf '\\tdep\\texample.com/dependency/number/%05d\\tv1.0.0\\th1:x=\\n' $i
    i=$((i + 1))
  done
  exit 0
fi
echo "go stub: nothing is built in this test: $*" >&2
exit 1
"""
HELM_STUB = f"#!/bin/sh\nprintf '{PINNED}'\n"
# `python3 -m pip download ...` fetches nothing; `python3 - TMP DEST VERSION` (the layout
# script on stdin) makes the schemas folder, as the real one does.
PYTHON_STUB = """#!/bin/sh
if [ "$1" = - ]; then cat >/dev/null; mkdir -p "$3"; fi
exit 0
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _files_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*") if not path.is_dir()}


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    repo = tmp_path / "repo"
    (repo / SCRIPT).parent.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / SCRIPT, repo / SCRIPT)
    stubs = tmp_path / "stubs"
    _executable(stubs / "go", GO_STUB)
    _executable(stubs / "python3", PYTHON_STUB)
    cache = tmp_path / "cache"
    # Already "built": the pinned binaries are in the cache, so only the schema step is left.
    _executable(cache / "bin" / "helm", HELM_STUB)
    _executable(cache / "bin" / "kubeconform", "#!/bin/sh\n")
    return {"repo": repo, "stubs": stubs, "cache": cache, "home": tmp_path / "home"}


def _run(sandbox: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{sandbox['stubs']}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(sandbox["home"]),  # the real ~/.cache/dstreams is never touched
        "DSTREAMS_TOOLS_CACHE": str(sandbox["cache"]),
        "DSTREAMS_HELM_VERSION": PINNED,
        "DSTREAMS_KUBECONFORM_VERSION": PINNED,
        "DSTREAMS_KUBE_VERSION": KUBE_VERSION,
    }
    return subprocess.run(
        ["bash", str(sandbox["repo"] / SCRIPT)],  # noqa: S607 - bash from the PATH above
        cwd=sandbox["repo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_fetching_the_schemas_writes_only_into_the_tools_cache(
    sandbox: dict[str, Path],
) -> None:
    result = _run(sandbox)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == str(sandbox["cache"] / "bin")
    markers = list((sandbox["cache"] / "k8s-schemas").glob(f".from-*-v{KUBE_VERSION}"))
    assert len(markers) == 1, "the schema step ran and left its marker in the cache"
    assert _files_under(sandbox["repo"]) == {str(SCRIPT)}


def test_a_rerun_is_a_no_op_that_also_leaves_nothing(sandbox: dict[str, Path]) -> None:
    assert _run(sandbox).returncode == 0
    before = _files_under(sandbox["cache"])
    result = _run(sandbox)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "nothing was built or fetched the second time"
    assert _files_under(sandbox["cache"]) == before
    assert _files_under(sandbox["repo"]) == {str(SCRIPT)}
