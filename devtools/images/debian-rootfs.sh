#!/usr/bin/env bash
# Builds a Debian root filesystem from Debian's own packages with debootstrap and writes it as a
# tarball for `docker import`: the local base image of the project's images where no public image
# registry is reachable (service/dev/images.py calls this and caches the result by content hash).
#
#   debian-rootfs.sh OUT.tar SUITE MIRROR PACKAGE...
#
# Needs root (debootstrap chroots and sets file owners). Downloaded .debs are kept in
# $DSTREAMS_DEBOOTSTRAP_CACHE (default: beside OUT.tar) so a rebuild fetches nothing new.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 OUT.tar SUITE MIRROR PACKAGE..." >&2; exit 2; }
out=$1 suite=$2 mirror=$3
shift 3
include=$(IFS=,; echo "$*")
[ "$(id -u)" = 0 ] || { echo "debian-rootfs: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null \
  || { echo "debian-rootfs: no debootstrap; install it (make sysdeps does)" >&2; exit 1; }

out_dir=$(dirname "$out")
debs=${DSTREAMS_DEBOOTSTRAP_CACHE:-$out_dir/debs}
mkdir -p "$out_dir" "$debs"
work=$(mktemp -d "$out_dir/rootfs.XXXXXX")
cleanup() {
  # debootstrap mounts proc and sys inside the tree while it configures packages; a failed run can
  # leave them mounted, and the delete below must not reach into them.
  grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# minbase: essential packages and apt only; --include adds what the images need, with their
# dependencies (never their recommendations).
if ! debootstrap --variant=minbase --include="$include" --cache-dir="$debs" \
    "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -n 40 "$work/debootstrap.log" >&2
  echo "debian-rootfs: debootstrap failed (log above)" >&2
  exit 1
fi

# What a container never needs: package caches and lists (apt-get update refills them), manuals
# and translations. Copyright files stay.
root=$work/root
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log
find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
# Docker writes these per container.
: >"$root/etc/hostname"
: >"$root/etc/resolv.conf"

tar -C "$root" --numeric-owner -cf "$out.partial" .
mv "$out.partial" "$out"
