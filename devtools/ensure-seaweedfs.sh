#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (Apache-2.0) into ~/.cache/dstreams/bin when it is missing: the real
# S3-compatible server the tests of checkpoints on object storage start (service/dev/s3_server.py).
#
# Like helm (devtools/ensure-helm.sh) it is built from source through the Go module proxy, since
# release binaries live on hosts this project's machines cannot reach. SeaweedFS's go.mod carries
# a `replace`, which `go install pkg@version` refuses, so devtools/seaweedfs/ is a small wrapper
# module that requires the pinned version, repeats that `replace` and names `weed` as its tool;
# its go.sum pins every dependency. Building takes many minutes on two cores the first time; the
# binary is cached and a rerun is a no-op. A pin bump (in devtools/seaweedfs/go.mod) rebuilds.
#
# Prints the binary's path on its last line.
set -euo pipefail

CACHE="${DSTREAMS_TOOLS_CACHE:-$HOME/.cache/dstreams}"
BIN="$CACHE/bin"
cd "$(dirname "$0")/seaweedfs"
mkdir -p "$BIN"
MODULE="github.com/seaweedfs/seaweedfs"
# The pinned version: `require M V` or, inside a `require (...)` block, `M V`.
VERSION="$(awk -v m="$MODULE" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' go.mod)"
[ -n "$VERSION" ] || { echo "ensure-seaweedfs: no 'require $MODULE' line in go.mod" >&2; exit 1; }

# The version the binary was built from, read from its build info (the module of its package).
built() {
  [ -x "$BIN/weed" ] && go version -m "$BIN/weed" 2>/dev/null \
    | grep -qE "^[[:space:]]+mod[[:space:]]+$MODULE[[:space:]]+$VERSION([[:space:]]|$)"
}

if ! built; then
  command -v go >/dev/null || { echo "ensure-seaweedfs: go (1.26 or later) is needed to build weed" >&2; exit 1; }
  echo "ensure-seaweedfs: building $MODULE/weed@$VERSION (many minutes the first time)" >&2
  # CGO off and -trimpath: a static binary that does not depend on this machine's libc or paths.
  # Built under a temporary name and moved into place, so an interrupted build leaves nothing.
  CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath -mod=readonly" \
    go build -ldflags "-s -w" -o "$BIN/.weed.tmp" "$MODULE/weed"
  mv -f "$BIN/.weed.tmp" "$BIN/weed"
fi
echo "$BIN/weed"
