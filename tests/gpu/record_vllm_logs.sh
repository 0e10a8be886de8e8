#!/usr/bin/env bash
# Records real vLLM 0.22.0 start-up logs on the lent 2x H200 machine (device tool, nvidia-h200-x2), for
# tests/unit/test_h200_recorded_logs.py (results: tests/data/vllm_logs_h200/README.md). Runs from the
# repository root there. Before it: `../shared/tools/stage-gpu-wheels "" .stage/vllm` here, then back-to-back
# device calls `mkdir -p /tmp/st && cp .stage/vllm/pN/piece.N /tmp/st/` (carry .stage/vllm/pN) for N = 0-4,
# and a last call that copies piece.5 the same way and runs this script (argument: .stage/vllm/sha256).
# Each vLLM server runs until it has logged its KV cache size, then its process group is killed: no
# request is served. VLLM_USE_FLASHINFER_SAMPLER=0: without the flashinfer-cubin package (not staged)
# the profile run's dummy sampler JIT-compiles FlashInfer's top-k/top-p kernels for minutes (seen: no
# progress 70-100 s after the model loaded, on every run of the first attempt).
# Usage: record_vllm_logs.sh TAR_SHA256   (env: OUT, BUDGET_S = seconds before the last run must end)
set -uo pipefail
OUT=${OUT:-/tmp/vllm_rec_out}
END=$((SECONDS + ${BUDGET_S:-520}))
logs=/tmp/vllm_logs models=/tmp/models
mkdir -p "$OUT" "$logs" "$models"
repo=$PWD

# Models are built with the image's transformers while the wheels install.
python3 tests/gpu/make_tiny_models.py "$models" >"$logs/make_models.log" 2>&1 &
builder=$!
(
  cd /tmp/st || exit 1
  cat piece.* >w.tar && echo "$1  w.tar" | sha256sum -c --quiet && tar xf w.tar &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site w/*.whl
) >"$logs/install.log" 2>&1 || { tail -20 "$logs/install.log"; exit 1; }
export PYTHONPATH=/tmp/site
wait "$builder" || { cat "$logs/make_models.log"; exit 1; }
cat "$logs/make_models.log"
nvidia-smi -L | tee "$logs/nvidia-smi.txt"
python3 -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "torch", torch.__version__,
  "transformers", transformers.__version__)' 2>&1 | tail -1 | tee "$logs/versions.txt"

save() { tar czf "$OUT/vllm_logs.tgz" -C /tmp vllm_logs; }

# start NAME GPUS PORT MODEL [vllm serve args...]: one server in its own process group.
start() {
  local name=$1 gpus=$2 port=$3 model=$models/$4
  shift 4
  mkdir -p "$logs/$name"
  cp "$model/config.json" "$logs/$name/config.json"
  printf '%s\n' "$@" >"$logs/$name/args.txt"
  CUDA_VISIBLE_DEVICES=$gpus VLLM_LOGGING_LEVEL=DEBUG VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 setsid \
    python3 -m vllm.entrypoints.cli.main serve "$model" --port "$port" "$@" >"$logs/$name/vllm.log" 2>&1 &
  echo $! >"$logs/$name/pid"
  echo "$SECONDS" >"$logs/$name/t0"
  echo "$(date +%T) start $name on GPU $gpus: $*"
}

# finish NAME LIMIT: wait for the KV cache report (or exit, or LIMIT s after start), give it 3 s more, kill.
finish() {
  local name=$1 limit=$2 log=$logs/$1/vllm.log pid t0 grace=-1
  pid=$(cat "$logs/$name/pid") t0=$(cat "$logs/$name/t0")
  while kill -0 "$pid" 2>/dev/null && ((SECONDS - t0 < limit)); do
    if ((grace < 0)); then
      grep -q 'Maximum concurrency' "$log" && grace=3
    else
      ((grace == 0)) && break
      grep -qE 'init engine .* took' "$log" && break
      ((grace--))
    fi
    sleep 1
  done
  sleep 1
  kill -TERM -- "-$pid" 2>/dev/null
  sleep 3
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$(date +%T) end $name after $((SECONDS - t0))s"
  grep -E 'Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|CUDA graph|Free memory on device|Error|error:' \
    "$log" | grep -v 'DEBUG.*ignored' | cut -c1-400 | head -20
  save
}

# Room for a step of LIMIT seconds before the budget ends?
room() { ((SECONDS + $1 < END)); }
settle() { sleep 2; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; }

L=--max-model-len=4096
# 1. TP 1, one model per GPU, compiled with CUDA graphs (the default).
if room 110; then
  start r01_llama_tp1_bf16 0 8001 llama_gqa $L --gpu-memory-utilization=0.5
  start r02_gemma3_tp1_bf16 1 8002 gemma3_hybrid $L --gpu-memory-utilization=0.4
  finish r01_llama_tp1_bf16 110
  finish r02_gemma3_tp1_bf16 110
  settle
fi
# 2. MLA + MoE at TP 2.
if room 120; then
  start r03_dsv3_tp2_bf16 0,1 8003 dsv3_mla $L --gpu-memory-utilization=0.5 --tensor-parallel-size=2 --moe-backend=triton
  finish r03_dsv3_tp2_bf16 120
  settle
fi
# 3. FP8 KV cache, eager (no compile, no CUDA graphs), one model per GPU.
if room 80; then
  start r06_llama_tp1_fp8_eager 0 8006 llama_gqa $L --gpu-memory-utilization=0.7 --kv-cache-dtype=fp8 --enforce-eager
  start r07_gemma3_tp1_fp8_eager 1 8007 gemma3_hybrid $L --gpu-memory-utilization=0.6 --kv-cache-dtype=fp8 --enforce-eager
  finish r06_llama_tp1_fp8_eager 80
  finish r07_gemma3_tp1_fp8_eager 80
  settle
fi
# 4. GQA at TP 2 with a smaller batch, eager.
if room 80; then
  start r05_llama_tp2_bf16_eager 0,1 8005 llama_gqa $L --gpu-memory-utilization=0.6 --tensor-parallel-size=2 \
    --max-num-seqs=256 --max-num-batched-tokens=4096 --enforce-eager
  finish r05_llama_tp2_bf16_eager 80
  settle
fi
# 5. MLA with decode context parallelism.
if room 100; then
  start r04_dsv3_tp2_dcp2_bf16_eager 0,1 8004 dsv3_mla $L --gpu-memory-utilization=0.5 --tensor-parallel-size=2 \
    --decode-context-parallel-size=2 --moe-backend=triton --enforce-eager
  finish r04_dsv3_tp2_dcp2_bf16_eager 100
fi
save
cd "$repo" && ls -la "$OUT"
