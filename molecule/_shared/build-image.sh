#!/usr/bin/env bash
# Build a Debian systemd image for the molecule scenarios from the Debian mirror (no registry is
# reachable here): mmdebstrap writes a root filesystem tarball, `podman import` turns it into an image.
# Usage: build-image.sh IMAGE_NAME [SUITE] [EXTRA_PACKAGE...]
# Cached by name: an existing image is kept, so a second run costs nothing. Rebuild: podman rmi IMAGE_NAME.
set -euo pipefail
image=${1:?usage: build-image.sh IMAGE_NAME [SUITE] [EXTRA_PACKAGE...]}
suite=${2:-bookworm}
shift $(($# >= 2 ? 2 : 1))
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

# Scenarios created at the same time build one image, once: the second waits here, then finds it.
exec 9>"${TMPDIR:-/tmp}/llmdeploy-build-image.lock"
flock 9

if podman image exists "$image"; then
  echo "image $image: present, not rebuilt"
  exit 0
fi

# The machine's own Debian mirror (deb822 or one-line sources), else deb.debian.org.
mirror=$(grep -h -o -E '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null |
  awk '{print $2}' | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
  mirror=$(grep -h -o -E '^deb +[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{print $2}' | grep -v security | head -n1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

include=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,iproute2,ca-certificates
for p in "$@"; do include="$include,$p"; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "image $image: mmdebstrap $suite from $mirror (+ $include)"
mmdebstrap --quiet --variant=minbase --include="$include" --format=tar "$suite" "$tmp/rootfs.tar" "$mirror"
podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  "$tmp/rootfs.tar" "$image" >/dev/null
echo "image $image: built"
