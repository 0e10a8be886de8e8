#!/usr/bin/env bash
# Make a consumer project in DEST (outside the repository): build this collection's tarball, install it the
# standard way (requirements.yml with a file source, ansible-galaxy into DEST/collections), copy the
# consumer's playbooks beside it. Prints DEST. Galaxy is not needed: the collection's dependency
# (ansible.posix) is the one the ansible package already carries.
set -euo pipefail
# Nothing of the caller's Ansible settings (molecule's, this checkout's) may leak into the consumer.
unset "${!ANSIBLE_@}"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${1:?usage: setup.sh DEST}
case "$(realpath -m "$dest")/" in "$repo"/*) echo "setup.sh: DEST must be outside $repo" >&2; exit 2 ;; esac
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
rm -rf "$dest/collections" "$dest"/llmdeploy-llm-*.tar.gz
ansible-galaxy collection build --force --output-path "$dest" "$repo" >/dev/null
tarball=$(ls "$dest"/llmdeploy-llm-*.tar.gz)
cp "$here"/ansible.cfg "$here"/*.yml "$dest"/
cat > "$dest/requirements.yml" <<REQ
---
collections:
  - name: $tarball
    type: file
REQ
(cd "$dest" && ANSIBLE_CONFIG="$dest/ansible.cfg" ansible-galaxy collection install --force -r requirements.yml -p ./collections >/dev/null)
echo "$dest"
