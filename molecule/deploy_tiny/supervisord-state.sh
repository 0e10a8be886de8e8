# Read inside the container by side_effect.yml: the program's pid, the times supervisord spawned it (its
# own log), the --max-num-seqs value of the launch spec.
/opt/llmdeploy-supervisor/bin/supervisorctl -c /etc/vllm/supervisord.conf pid vllm
grep -c "spawned: 'vllm'" /var/log/vllm/supervisord.log || true
grep -A1 -F '"--max-num-seqs",' /etc/vllm/vllm.launch.json | tail -n 1 | tr -d ' ,'
