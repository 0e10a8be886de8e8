#!/usr/bin/env bash
# The deploy playbooks on the lent one-GPU machine (device kind nvidia-h200), run from the repository root
# there with tests/gpu/inventory.yml (connection local). See tests/gpu/README.md for the staging calls.
# Steps (arguments, in order):
#   setup   Ansible from .stage/gpu-tools, the vLLM wheelhouse assembled in /tmp/st/w, the two models built
#   chat    deploy_tiny.yml: the trained tiny chat model (gate, tool call and reasoning checks)
#   again   the same deploy again (must report changed=0)
#   dsv3    deploy_model.yml with tiny_dsv3 (MLA + MoE, the DeepSeek-V3/Kimi code path), replacing the chat model
#   gguf    the chat model as a two-part Q8_0 GGUF (tests/models/make_gguf.py, with the engine venv's gguf), deployed
#           with deploy_model.yml -e llm_model_name=tiny_test_gguf: parts merged by hf_model, base config and
#           tokenizer given as --hf-config-path/--tokenizer, vLLM 0.22's own GGUF loader, serve_verify's gate
#   gguf_again   the same deploy again (must report changed=0)
#   gguf_bad     a GGUF written without the rotary permutation (loads, answers garbage): the gate must refuse it
#                and the verified GGUF service must come back
#   sglang  llm_engine=sglang with the chat model (SGLang 0.5.17, staged with tests/gpu/stage_sglang_wheels.sh into
#           /tmp/sgst): first on port 8000, which the vLLM service holds (must be refused before any change), then
#           on port 8001 (triton attention: the staged sglang-kernel has no FA3), serve_verify's gate
#   sglang_again the same deploy again (must report changed=0)
#   collect the logs, reports and engine log into $OUT/gpu_deploy.tgz
set -uo pipefail
OUT=${OUT:-/tmp/gpu_deploy_out}
SRC=/srv/llm-src
mkdir -p "$OUT"
export PYTHONPATH=/tmp/ans ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_HOME=/tmp/ans-home ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_COLLECTIONS_PATH="$PWD/.collections:/tmp/ans-col" PYTHONUNBUFFERED=1
playbook() { python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0] = "ansible-playbook"; main()' "$@"; }
deploy() {
  local name=$1; shift
  echo "=== $name: ansible-playbook -i tests/gpu/inventory.yml $*"
  local start=$SECONDS
  playbook -i tests/gpu/inventory.yml "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc wall=$((SECONDS - start))s"
  grep -A1 'PLAY RECAP' "$OUT/$name.log" | tail -1
  grep -E 'serve_verify (PASSED|FAILED)|FAILED!|fatal:' "$OUT/$name.log" | head -5
  return $rc
}

for step in "$@"; do
  case $step in
    setup)
      # Ansible's own wheels only: a supervisor on PYTHONPATH would make pip skip the role's install.
      rm -rf /tmp/ans/supervisor*
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ans \
        $(ls .stage/gpu-tools/wheels/*.whl | grep -v /supervisor-) || exit 1
      mkdir -p /tmp/ans-col /tmp/gpu-tools && tar xzf .stage/gpu-tools/collections.tgz -C /tmp/ans-col
      cp -r .stage/gpu-tools/wheels /tmp/gpu-tools/
      mkdir -p .collections/ansible_collections/llmdeploy && ln -sfn "$PWD" .collections/ansible_collections/llmdeploy/llm
      [ -f .stage/vllm/sha256 ] && cp .stage/vllm/sha256 /tmp/st/
      if [ ! -d /tmp/st/w ]; then
        (cd /tmp/st && cat piece.* > w.tar && echo "$(cat sha256)  w.tar" | sha256sum -c - && tar xf w.tar && rm w.tar piece.*) || exit 1
      fi
      # Wheels the vLLM list lacks: humming-kernels (vLLM 0.22 imports it for any quantized checkpoint, GGUF too).
      [ -d .stage/extra ] && cp .stage/extra/*.whl /tmp/st/w/
      echo "wheelhouse: $(ls /tmp/st/w | wc -l) wheels"
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      mkdir -p "$SRC"
      start=$SECONDS
      [ -f "$SRC/tiny-chat/model.safetensors" ] || python3 tests/models/train_tiny_chat.py "$SRC/tiny-chat" --max-seconds 300 | tail -1 || exit 1
      du -sb "$SRC"/* | tee "$OUT/model_sizes.txt"
      chmod -R a+rX "$SRC"
      echo "models built in $((SECONDS - start))s" ;;
    chat)
      deploy chat playbooks/deploy_tiny.yml -e hf_model_source_dir="$SRC/tiny-chat" -e llm_start_timeout_minutes=6 ;;
    again)
      deploy again playbooks/deploy_tiny.yml -e hf_model_source_dir="$SRC/tiny-chat" -e llm_start_timeout_minutes=6 ;;
    dsv3)
      python3 tests/gpu/make_tiny_models.py "$SRC" dsv3_mla || exit 1
      deploy dsv3 playbooks/deploy_model.yml -e llm_model_name=tiny_dsv3 -e hf_model_source_dir="$SRC/dsv3_mla" -e llm_start_timeout_minutes=6 \
        -e '{"llm_engine_args": {"moe-backend": "triton"}}' ;;
    gguf)
      # The gguf package from the wheelhouse, beside the image's numpy and safetensors.
      python3 -m pip install -q --no-index --no-deps --target /tmp/gguf-py /tmp/st/w/gguf-*.whl || exit 1
      PYTHONPATH=/tmp/gguf-py python3 tests/models/make_gguf.py "$SRC/tiny-chat" "$SRC/tiny-chat-gguf/tiny-chat-Q8_0.gguf" \
        --type Q8_0 --split-max-tensors 12 || exit 1
      PYTHONPATH=/tmp/gguf-py python3 tests/models/make_gguf.py "$SRC/tiny-chat" "$SRC/tiny-chat-gguf-bad/tiny-chat-Q8_0.gguf" \
        --type Q8_0 --split-max-tensors 12 --no-permute || exit 1
      chmod -R a+rX "$SRC"
      deploy gguf playbooks/deploy_model.yml -e llm_model_name=tiny_test_gguf -e llm_model_source_dir="$SRC/tiny-chat-gguf" \
        -e llm_gguf_base_source_dir="$SRC/tiny-chat" -e llm_start_timeout_minutes=6 ;;
    gguf_again)
      deploy gguf_again playbooks/deploy_model.yml -e llm_model_name=tiny_test_gguf -e llm_model_source_dir="$SRC/tiny-chat-gguf" \
        -e llm_gguf_base_source_dir="$SRC/tiny-chat" -e llm_start_timeout_minutes=6 ;;
    gguf_bad)
      deploy gguf_bad playbooks/deploy_model.yml -e llm_model_name=tiny_test_gguf -e llm_model_source_dir="$SRC/tiny-chat-gguf-bad" \
        -e llm_gguf_base_source_dir="$SRC/tiny-chat" -e llm_start_timeout_minutes=6
      echo "after the refused deploy: $(curl -s -m 30 http://127.0.0.1:8000/v1/models | head -c 300)" ;;
    sglang|sglang_again|sglang_port)
      if [ ! -d /tmp/st/sgl ]; then
        (cd /tmp/sgst && cat piece.* > w.tar && echo "$(cat "$OLDPWD/.stage/sglang/sha256")  w.tar" | sha256sum -c - \
          && tar xf w.tar && rm w.tar piece.*) || exit 1
        # SGLang's wheelhouse: the vLLM list's dependencies (not vLLM itself) and SGLang's own wheels.
        mkdir -p /tmp/st/sgl && cp /tmp/st/w/*.whl /tmp/sgst/sgw/*.whl /tmp/st/sgl/ && rm -f /tmp/st/sgl/vllm-*.whl
        echo "SGLang wheelhouse: $(ls /tmp/st/sgl | wc -l) wheels"
      fi
      nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
      # SGLang compiles some kernels at first use (tvm-ffi JIT): nvcc and ninja on the service's PATH.
      sgl_env="{\"CUDA_HOME\": \"$(dirname "$(dirname "$nvcc")")\", \"PATH\": \"$(dirname "$nvcc"):/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"}"
      sgl_args='{"attention-backend": "triton", "sampling-backend": "pytorch", "disable-cuda-graph": true}'
      common=(-e llm_model_name=tiny_test -e llm_engine=sglang -e llm_model_source_dir="$SRC/tiny-chat"
              -e ml_env_wheelhouse=/tmp/st/sgl -e llm_start_timeout_minutes=8
              -e "{\"llm_engine_args\": $sgl_args, \"llm_engine_env\": $sgl_env}")
      # One GPU: the vLLM service from the steps above would hold 90 % of it (measured: SGLang then sized its
      # pool from what was left and died allocating NCCL memory), so it is stopped first, except for the
      # port check, which needs it running.
      if [ "$step" != sglang_port ] && [ -f /etc/vllm/supervisord.conf ]; then
        /opt/llmdeploy-supervisor/bin/supervisorctl -c /etc/vllm/supervisord.conf stop vllm || true
      fi
      if [ "$step" = sglang_port ]; then
        deploy sglang_port_taken playbooks/deploy_model.yml "${common[@]}" && echo "UNEXPECTED: port 8000 was not refused"
      else
        deploy "$step" playbooks/deploy_model.yml "${common[@]}" -e llm_api_port=8001
      fi ;;
    collect)
      cp /var/log/vllm/vllm.log "$OUT/engine.log" 2>/dev/null
      cp /var/log/sglang/sglang.log "$OUT/sglang_engine.log" 2>/dev/null
      # Reports, the rendered service files (no secrets in this run) and supervisord's own log.
      tar czf "$OUT/gpu_deploy.tgz" reports /etc/vllm /var/log/vllm /etc/sglang /var/log/sglang 2>/dev/null
      ls -la "$OUT" ;;
  esac
done
