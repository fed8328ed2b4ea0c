#!/usr/bin/env bash
# Installs the Debian packages the test suite and demo need, only when they are missing.
# docker.io and debootstrap: the container tier (make test-containers) runs its own Docker engine
# when none answers, on a base image built from Debian's packages (service/dev/images.py).
set -euo pipefail
# Root's tools live in sbin, which another user's PATH may lack.
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
need=()
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
# Any dockerd serves (a CI runner's comes from Docker's own packages); a docker client alone does
# not, because the tooling starts the engine itself when none answers.
have dockerd || need+=(docker.io)
have debootstrap || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
