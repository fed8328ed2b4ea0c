#!/usr/bin/env bash
# Installs what the Helm chart's tests need, each only when it is missing:
#   helm and kubeconform  in ~/.cache/dstreams/bin
#   Kubernetes JSON Schemas for kubeconform, offline, in ~/.cache/dstreams/k8s-schemas
#
# helm and kubeconform are built from source with `go install` through the Go module proxy,
# because release binaries live on hosts this project's machines cannot reach. Building helm takes
# several minutes on two cores, so versions are pinned and binaries cached: a rerun is a no-op.
#
# kubeconform normally downloads its schemas at run time, from a host we cannot reach either. The
# same schemas ship inside the `kubernetes-validate` package on PyPI; this script fetches that
# wheel with pip and lays one Kubernetes version out the way kubeconform expects (8.5 MB).
#
# Prints the bin directory on its last line.
set -euo pipefail

HELM_VERSION="${DSTREAMS_HELM_VERSION:-v3.21.4}"
KUBECONFORM_VERSION="${DSTREAMS_KUBECONFORM_VERSION:-v0.8.0}"
# The PyPI package carrying the schemas, and the Kubernetes version the chart is checked against.
SCHEMAS_PACKAGE="kubernetes-validate==${DSTREAMS_K8S_SCHEMAS_PACKAGE_VERSION:-1.37.0}"
KUBE_VERSION="${DSTREAMS_KUBE_VERSION:-1.34.0}"
CACHE="${DSTREAMS_TOOLS_CACHE:-$HOME/.cache/dstreams}"
BIN="$CACHE/bin"
SCHEMAS="$CACHE/k8s-schemas"
cd "$(dirname "$0")/.."
mkdir -p "$BIN"

# A pin bump is noticed from the module version in each binary's build info, and rebuilds.
# The build info is read whole before grep: `go ... | grep -q` under pipefail fails whenever grep
# stops reading at its match before go has written the rest (SIGPIPE), and would rebuild.
built() { # binary, module, version
  local info
  [ -x "$BIN/$1" ] && info="$(go version -m "$BIN/$1" 2>/dev/null)" \
    && grep -qE "^[[:space:]]+mod[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" <<<"$info"
}

build() { # package@version [ldflags]
  command -v go >/dev/null || { echo "ensure-helm: go (1.24 or later) is needed to build $1" >&2; exit 1; }
  echo "ensure-helm: building $1 (several minutes the first time)" >&2
  # CGO off and -trimpath: a static binary that does not depend on this machine's libc or paths.
  GOBIN="$BIN" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" go install -ldflags "-s -w ${2:-}" "$1"
}

# What helm's own release build stamps in: its version, and the Kubernetes version of the client
# libraries it is built with (1.36 for v3.21), which `helm lint` checks deprecated APIs against
# and `helm template` assumes when no cluster is asked. Unstamped, both say Kubernetes 1.20.
HELM_K8S_MINOR="${DSTREAMS_HELM_K8S_MINOR:-36}"
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in lint/rules chartutil; do
  helm_ldflags+=" -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1"
  helm_ldflags+=" -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$HELM_K8S_MINOR"
done
helm_stamped() { [ "$("$BIN/helm" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]; }

{ built helm helm.sh/helm/v3 "$HELM_VERSION" && helm_stamped; } \
  || build "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$helm_ldflags"
built kubeconform github.com/yannh/kubeconform "$KUBECONFORM_VERSION" \
  || build "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"

marker="$SCHEMAS/.from-$SCHEMAS_PACKAGE-v$KUBE_VERSION"
if [ ! -f "$marker" ]; then
  python=".venv/bin/python"; [ -x "$python" ] || python="python3"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  echo "ensure-helm: fetching Kubernetes $KUBE_VERSION schemas from $SCHEMAS_PACKAGE" >&2
  "$python" -m pip download --quiet --no-deps --dest "$tmp" "$SCHEMAS_PACKAGE"
  "$python" - "$tmp" "$SCHEMAS" "$KUBE_VERSION" <<'PY'
"""Write v<version>-standalone-strict/<kind>-<group>-<version>.json, as kubeconform expects.

The package's files point into one shared definitions file through an $id on a web host, which
kubeconform would try to download. Each resource file here instead carries the definitions it
reaches under its own $defs, so it validates with no network and no other file.
"""
import json
import pathlib
import re
import shutil
import sys
import zipfile

tmp, dest, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
ref = re.compile(r'"\$ref": "[^"#]*#/\$defs/([^"]+)"')
(wheel,) = tmp.glob("*.whl")
prefix = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict/"
out = tmp / "out" / f"v{version}-standalone-strict"
out.mkdir(parents=True)
with zipfile.ZipFile(wheel) as archive:
    names = [name for name in archive.namelist() if name.startswith(prefix)]
    if not names:
        sys.exit(f"ensure-helm: the package has no schemas for Kubernetes {version}")
    definitions = json.loads(archive.read(prefix + "_definitions.json"))["$defs"]
    for name in names:
        text = archive.read(name).decode()
        schema = json.loads(text)
        if "kind" not in schema.get("properties", {}):
            continue  # a fragment, not a resource kubeconform would look up
        reached, pending = {}, ref.findall(text)
        while pending:
            key = pending.pop()
            if key not in reached:
                reached[key] = definitions[key]
                pending += ref.findall(json.dumps(definitions[key]))
        schema.pop("$id", None)
        schema["$defs"] = reached
        text = ref.sub(lambda m: f'"$ref": "#/$defs/{m.group(1)}"', json.dumps(schema))
        (out / name[len(prefix) :]).write_text(text)
if dest.exists():
    shutil.rmtree(dest)
dest.parent.mkdir(parents=True, exist_ok=True)
shutil.move(str(out.parent), str(dest))
PY
  touch "$marker"
fi
echo "$BIN"
