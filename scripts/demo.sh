#!/usr/bin/env bash
# `make demo`: the main command on an embedded default. A local podman container running systemd (the
# molecule image, created by molecule/_shared/create.yml from the deploy_tiny platform), the tiny chat model
# on an olah mirror inside it (molecule/_shared/tiny_hub.yml), then playbooks/deploy_tiny.yml itself against
# inventory/demo. Leaves the endpoint up; `make demo-down` (scripts/demo.sh down) removes it.
#   scripts/demo.sh up | down
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="$root/.venv/bin:$PATH" ANSIBLE_CONFIG="$root/ansible.cfg" ANSIBLE_NOCOLOR=1
export CONTAINERS_CONF="$root/molecule/_shared/containers.conf"
name=llmdeploy-demo
state="$root/.demo"

platforms() {
  # The deploy_tiny scenario's platform, renamed and with its ${...} references expanded.
  python3 - "$root" "$name" "$state" <<'PY'
import json, os, sys, yaml
root, name, state = sys.argv[1:]
os.environ.setdefault("MOLECULE_PROJECT_DIRECTORY", root)
platform = yaml.safe_load(open(f"{root}/molecule/deploy_tiny/molecule.yml"))["platforms"][0]
platform = json.loads(os.path.expandvars(json.dumps(platform).replace("${LLMDEPLOY_WHEELS_DIR:-/opt/wheels}",
                                                                        os.environ.get("LLMDEPLOY_WHEELS_DIR", "/opt/wheels"))))
platform["name"] = name
print(json.dumps({"molecule_yml": {"platforms": [platform]}, "molecule_instance_config": f"{state}/instances.yml"}))
PY
}

case "${1:-up}" in
  up)
    mkdir -p "$state"
    platforms >"$state/platforms.json"
    start=$(date +%s)
    ansible-playbook molecule/_shared/create.yml -e "@$state/platforms.json" >"$state/create.log"
    echo "container $name: up ($(($(date +%s) - start)) s)"
    ansible-playbook -i inventory/demo molecule/_shared/tiny_hub.yml -e "tiny_hub_dir=$state/hub" >"$state/hub.log"
    echo "olah mirror with llmdeploy-test/tiny-chat: up ($(($(date +%s) - start)) s)"
    ansible-playbook -i inventory/demo playbooks/deploy_tiny.yml | tee "$state/deploy.log" |
      sed -n '/TASK \[Show the CPU plan\]/,/^$/p;/PLAY RECAP/,$p'
    echo
    cat "reports/serve_verify/$name/report.md"
    key=$(sed -n 's/^llm_api_key: *//p' inventory/demo/group_vars/gpu_hosts.yml)
    echo
    echo "verified endpoint after $(($(date +%s) - start)) s. Try it:"
    echo "  podman exec $name curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Authorization: Bearer $key'" \
      "-H 'Content-Type: application/json' -d '{\"model\": \"llmdeploy-test/tiny-chat\"," \
      "\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}]}'"
    echo "Remove it: make demo-down"
    ;;
  down)
    podman rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$state"
    echo "container $name removed"
    ;;
  *)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
