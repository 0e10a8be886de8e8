# Shared by the tests/bench/*.sh scripts (sourced; not a benchmark itself: `make bench` runs only
# tests/bench/*.sh).
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }

# A /bin/sh script, run inside the container, that polls /health and then sends one chat completion to
# MODEL with the service's API key; it returns when the completion is answered.
wait_answer_script() {
  cat <<SH
key=\$(sed -n 's/^VLLM_API_KEY="\\(.*\\)"\$/\\1/p' /etc/vllm/vllm.env)
until curl -sf -o /dev/null http://127.0.0.1:8000/health; do sleep 0.5; done
until curl -sf -H "Authorization: Bearer \$key" -H "Content-Type: application/json" \\
  -d '{"model":"$1","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}' \\
  http://127.0.0.1:8000/v1/chat/completions | grep -q completion_tokens; do sleep 0.5; done
SH
}
