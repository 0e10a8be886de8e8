#!/usr/bin/env bash
# System packages the test suite needs: podman (+runc, rootless helpers) and mmdebstrap for the
# molecule scenarios. Installs only what is missing, so a second run changes nothing.
set -euo pipefail
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs=(podman runc uidmap fuse-overlayfs slirp4netns mmdebstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
