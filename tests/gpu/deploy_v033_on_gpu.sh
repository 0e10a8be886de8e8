#!/usr/bin/env bash
# vLLM 0.33.0 (the default engine pin, torch 2.14.0) and SGLang 0.5.17 through the deploy playbooks on the lent
# one-GPU machine, run from a clean export of the collection (.stage/src, carried) with tests/gpu/inventory_v033.yml
# (connection local). Staging: tests/gpu/stage_vllm033_wheels.sh, one device call per piece into /tmp/st3.
#   deploy_v033_on_gpu.sh bg STEP...   start the steps in the background (setsid: they outlive the device call),
#                                      then wait as `wait` does
#   deploy_v033_on_gpu.sh wait [SECS]  wait up to SECS (default 540) for the background run, then copy the logs
#                                      so far into $OUT (every call returns what is there, the machine may go)
#   deploy_v033_on_gpu.sh STEP...      run the steps in the foreground
# Steps:
#   setup   Ansible, the pieces assembled, /opt/torch214 (the torch 2.14 overlay of the image's venv: its own
#           site-packages first, then the image's; nvidia/ links to the image's CUDA libraries beside NCCL 2.30.7),
#           SGLang's wheelhouse /tmp/st3/sgl, the tiny chat model trained
#   chat    deploy_tiny.yml on the bare machine (vLLM 0.33.0 under supervisord, serve_verify's gate)
#   again   the same deploy again (must report changed=0)
#   dsv3    deploy_model.yml with tiny_dsv3 (MLA + MoE) and --moe-backend triton, replacing the chat model
#   sglang_port   the SGLang deploy on port 8000, which the vLLM service holds: must be refused before any change
#   sglang  llm_engine=sglang with the chat model on port 8001 (tests/gpu/inventory.yml: the image's torch 2.11),
#           the vLLM service stopped first (one GPU)
#   sglang_again  the same SGLang deploy again (must report changed=0)
#   collect engine logs, reports and rendered service files into $OUT
set -uo pipefail
OUT=${OUT:-/tmp/v033-out}
RUN=/tmp/v033
WORK=/tmp/v033-src
SRC=/srv/llm-src
OVL=/opt/torch214
IMG_SP=/opt/torch/.venv/lib/python3.12/site-packages
mkdir -p "$OUT" "$RUN"

collect_logs() {
  tar czf "$OUT/v033_logs.tgz" -C "$RUN" . 2>/dev/null
  cp "$RUN/status.txt" "$OUT/" 2>/dev/null
}

case ${1:-} in
  bg)
    shift
    rm -f "$RUN/done"
    # The run works from a copy: every device call replaces the carried tree, and a later `wait` call did so
    # under the first run's feet (2026-12-07: each step after the first deploy failed at once, rc 5).
    rm -rf "$WORK" && cp -a "$PWD" "$WORK" || exit 1
    (cd "$WORK" && setsid nohup bash tests/gpu/deploy_v033_on_gpu.sh "$@" >"$RUN/run.log" 2>&1 </dev/null &)
    set -- wait ;;
esac
if [ "${1:-}" = wait ]; then
  limit=${2:-540}
  start=$SECONDS
  while [ ! -f "$RUN/done" ] && [ $((SECONDS - start)) -lt "$limit" ]; do sleep 5; done
  [ -f "$RUN/done" ] && echo "background run finished" || echo "background run still going after ${limit}s"
  cat "$RUN/status.txt" 2>/dev/null
  tail -5 "$RUN/run.log"
  collect_logs
  exit 0
fi

export PYTHONPATH=/tmp/ans ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_HOME=/tmp/ans-home ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH="$PWD/.collections:/tmp/ans-col" PYTHONUNBUFFERED=1
# The collection is this tree (every run: a copy made by `bg` has its own link).
mkdir -p .collections/ansible_collections/llmdeploy && ln -sfn "$PWD" .collections/ansible_collections/llmdeploy/llm
status() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$RUN/status.txt"; }
playbook() { python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0] = "ansible-playbook"; main()' "$@"; }
deploy() {
  local name=$1 inv=$2; shift 2
  status "=== $name: ansible-playbook -i $inv $*"
  local start=$SECONDS
  touch "$RUN/deploy_$name.log.start"
  playbook -i "$inv" -e @"$RUN/hw.yml" "$@" >"$RUN/deploy_$name.log" 2>&1
  local rc=$?
  status "$name rc=$rc wall=$((SECONDS - start))s $(grep -A1 'PLAY RECAP' "$RUN/deploy_$name.log" | tail -1 | tr -s ' ')"
  grep -E 'serve_verify (PASSED|FAILED)|Verdict:' "$RUN/deploy_$name.log" | head -3 | cut -c1-300 | tee -a "$RUN/status.txt"
  # The newest report (the vLLM steps' host is lent-gpu, the SGLang steps' lent-h200), if this run wrote one.
  local report
  report=$(ls -t reports/serve_verify/*/report.json 2>/dev/null | head -1)
  if [ -n "$report" ] && [ "$report" -nt "$RUN/deploy_$name.log.start" ]; then
    cp "$report" "$RUN/serve_verify_$name.json"
    cp "${report%.json}.md" "$RUN/serve_verify_$name.md"
  fi
  # 0 and 2 (a host failed) are verdicts; anything else (1, 4, 5, 250) means the run itself broke: stop, so
  # that no later step (the SGLang steps stop the vLLM service) acts on a state this step never reached.
  if [ $rc != 0 ] && [ $rc != 2 ]; then status "stopping: $name ended rc=$rc"; collect_logs; touch "$RUN/done"; exit $rc; fi
  return $rc
}
sglang_deploy() {  # sglang_deploy NAME PORT
  local nvcc env args
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  # SGLang compiles some kernels at first use (tvm-ffi JIT): nvcc and ninja on the service's PATH.
  env="{\"CUDA_HOME\": \"$(dirname "$(dirname "$nvcc")")\", \"PATH\": \"$(dirname "$nvcc"):/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"}"
  args='{"attention-backend": "triton", "sampling-backend": "pytorch", "disable-cuda-graph": true}'
  deploy "$1" tests/gpu/inventory.yml playbooks/deploy_model.yml -e llm_model_name=tiny_test -e llm_engine=sglang \
    -e llm_model_source_dir="$SRC/tiny-chat" -e ml_env_wheelhouse=/tmp/st3/sgl -e llm_start_timeout_minutes=8 \
    -e "{\"llm_engine_args\": $args, \"llm_engine_env\": $env}" -e llm_api_port="$2"
}

for step in "$@"; do
  case $step in
    setup)
      start=$SECONDS
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$RUN/gpu.txt"
      case $(head -1 "$RUN/gpu.txt") in *H100*) hw=h100_x1 ;; *) hw=h200_x1 ;; esac
      echo "llm_hardware_name: $hw" >"$RUN/hw.yml"
      # Ansible's own wheels only: a supervisor on PYTHONPATH would make pip skip the role's install.
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ans \
        $(ls .stage/gpu-tools/wheels/*.whl | grep -v /supervisor-) || exit 1
      mkdir -p /tmp/ans-col /tmp/gpu-tools && tar xzf .stage/gpu-tools/collections.tgz -C /tmp/ans-col
      cp -r .stage/gpu-tools/wheels /tmp/gpu-tools/
      if [ ! -d /tmp/st3/w ]; then
        (cd /tmp/st3 && cat piece.* >w.tar && rm piece.* && echo "$(cat "$OLDPWD/.stage/v033.sha256")  w.tar" | sha256sum -c - \
          && tar xf w.tar && rm w.tar) || { status "setup: the pieces do not assemble ($(ls /tmp/st3 | tr '\n' ' '))"; exit 1; }
      fi
      status "setup: wheelhouse $(ls /tmp/st3/w | wc -l) wheels, overlay $(ls /tmp/st3/t | wc -l), $((SECONDS - start))s"
      # The torch 2.14 overlay: a venv of the image's python whose .pth puts the image's site-packages after its
      # own and adds that prefix to site.PREFIXES, so site.getsitepackages() (what ml_env's base.yml writes into
      # the engine venv's .pth) names both.
      if [ ! -x $OVL/bin/python3 ]; then
        /opt/torch/.venv/bin/python3 -m venv --without-pip $OVL || exit 1
        sp=$OVL/lib/python3.12/site-packages
        printf '%s\n' "import site; site.PREFIXES.append('/opt/torch/.venv'); site.addsitedir('$IMG_SP')" >"$sp/zz-llmdeploy-image.pth"
        /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps --no-compile --target "$sp" /tmp/st3/t/*.whl || exit 1
        # torch's RPATH is $ORIGIN/../../nvidia/{cudnn,nvshmem,nccl,cusparselt,cu13}/lib: the image's libraries
        # are linked in beside the overlay's NCCL.
        for d in "$IMG_SP"/nvidia/*; do [ -e "$sp/nvidia/${d##*/}" ] || ln -s "$d" "$sp/nvidia/"; done
        chmod -R a+rX $OVL
      fi
      $OVL/bin/python3 - <<'EOF' 2>&1 | tee -a "$RUN/status.txt" | tail -3
import site, torch, triton, torchvision, transformers
x = torch.ones(1024, device="cuda")
print("overlay:", torch.__version__, torch.version.cuda, "nccl", torch.cuda.nccl.version(), "triton", triton.__version__,
      "torchvision", torchvision.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name(),
      float(x.sum()), site.getsitepackages())
EOF
      [ "${PIPESTATUS[0]}" = 0 ] || { status "setup: the overlay does not import"; exit 1; }
      mkdir -p /tmp/st3/sgl && (cd /tmp/st3 && xargs -a sgl-wheels.txt cp -t sgl/) || exit 1
      mkdir -p "$SRC"
      [ -f "$SRC/tiny-chat/model.safetensors" ] || python3 tests/models/train_tiny_chat.py "$SRC/tiny-chat" --max-seconds 300 | tail -1 | tee -a "$RUN/status.txt"
      chmod -R a+rX "$SRC"
      status "setup done in $((SECONDS - start))s (SGLang wheelhouse $(ls /tmp/st3/sgl | wc -l) wheels)" ;;
    chat|again)
      deploy "$step" tests/gpu/inventory_v033.yml playbooks/deploy_tiny.yml -e hf_model_source_dir="$SRC/tiny-chat" \
        -e llm_start_timeout_minutes=8
      cp /var/log/vllm/vllm.log "$RUN/engine_after_$step.log" 2>/dev/null ;;
    dsv3)
      [ -d "$SRC/dsv3_mla" ] || python3 tests/gpu/make_tiny_models.py "$SRC" dsv3_mla | tail -2 | tee -a "$RUN/status.txt"
      chmod -R a+rX "$SRC"
      du -sb "$SRC"/* >"$RUN/model_sizes.txt"
      deploy dsv3 tests/gpu/inventory_v033.yml playbooks/deploy_model.yml -e llm_model_name=tiny_dsv3 \
        -e hf_model_source_dir="$SRC/dsv3_mla" -e llm_start_timeout_minutes=8 -e '{"llm_engine_args": {"moe-backend": "triton"}}'
      cp /var/log/vllm/vllm.log "$RUN/engine_after_dsv3.log" 2>/dev/null ;;
    sglang|sglang_again)
      # One GPU: the vLLM service would hold 90 % of it.
      [ -f /etc/vllm/supervisord.conf ] && /opt/llmdeploy-supervisor/bin/supervisorctl -c /etc/vllm/supervisord.conf stop vllm
      sglang_deploy "$step" 8001
      cp /var/log/sglang/sglang.log "$RUN/sglang_engine_after_$step.log" 2>/dev/null ;;
    sglang_port)
      # Before the sglang steps, while the vLLM service holds port 8000: refused before any change.
      sglang_deploy sglang_port 8000 && status "UNEXPECTED: port 8000 was not refused" ;;
    collect)
      cp /var/log/vllm/vllm.log "$RUN/engine.log" 2>/dev/null
      cp /var/log/sglang/sglang.log "$RUN/sglang_engine.log" 2>/dev/null
      tar czf "$RUN/service_files.tgz" /etc/vllm /var/log/vllm /etc/sglang /var/log/sglang \
        /opt/ml-env.releases/*/llmdeploy-*.txt 2>/dev/null
      status "collected" ;;
  esac
done
touch "$RUN/done"
