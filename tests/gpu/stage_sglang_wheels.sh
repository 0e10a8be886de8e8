#!/usr/bin/env bash
# Stage SGLang 0.5.17's wheels for the lent GPU machine in pieces that each fit one device call (64 MiB carry).
# Usage (from the project root): tests/gpu/stage_sglang_wheels.sh [LIST] [DIR]
#   LIST defaults to tests/gpu/sglang-0.5.17-gpu-wheels.txt, DIR to .stage/sglang (.stage/ is git-ignored).
# Downloads with the same pip flags as ../shared/tools/stage-gpu-wheels, slims sglang-kernel (drops binaries
# that an SM90 GPU with --attention-backend triton never loads; KEEP_FA3=1 keeps flash_ops for the fa3 backend),
# then tars the folder sgw/ and splits it into 60 MiB pieces: DIR/pN/piece.N, and DIR/sha256 (of the tar).
# On the machine (after the vLLM wheels went into /tmp/site), one device call per piece, back to back:
#   run(command="mkdir -p /tmp/sgst && cp .stage/sglang/pN/piece.N /tmp/sgst/", carry=[".stage/sglang/pN"])
# then:
#   cd /tmp/sgst && cat piece.* > w.tar && sha256sum w.tar && tar xf w.tar && \
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site-sgl sgw/transformers-*.whl sgw/tokenizers-*.whl && \
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site \
#     $(ls sgw/*.whl | grep -v -e /transformers- -e /tokenizers-)
#   export PYTHONPATH=/tmp/site-sgl:/tmp/site CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=${1:-$here/sglang-0.5.17-gpu-wheels.txt}
dir=${2:-.stage/sglang}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $(for n in 5 17 24 27 28 31 34 35; do echo --platform manylinux_2_${n}_x86_64; done) \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$tmp/sgw" -r "$list"

# Slim sglang-kernel: same name and version, the dropped files taken out of the archive and of RECORD.
#  - sgl_kernel/flash_ops.abi3.so: FlashAttention-3 (~1.07 GB unpacked, ~326 MB packed); imported only by
#    sgl_kernel/flash_attn.py, which sglang imports only for the fa3 attention backend (and xpu/vision paths).
#  - sgl_kernel/sm100/: load_utils picks sm90/common_ops when the compute capability is 90 (H100/H200).
#  - sgl_kernel/infllm_ops*.so: loaded lazily by sgl_kernel.infllm_v2 (InfLLM-V2 attention) only.
#  - sgl_kernel/flashmla_ops.abi3.so: imported only by sgl_kernel/flash_mla.py (FlashMLA, DeepSeek MLA backends).
KEEP_FA3=${KEEP_FA3:-0} python3 - "$tmp"/sgw/sglang_kernel-*.whl <<'EOF'
import os, re, sys, zipfile
src = sys.argv[1]
drop = re.compile(r"^sgl_kernel/(sm100/.*|infllm_ops[^/]*\.so|flashmla_ops[^/]*\.so"
                  + ("" if os.environ["KEEP_FA3"] == "1" else r"|flash_ops[^/]*\.so") + ")$")
out = src + ".slim"
dropped = []
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
    record = None
    for info in zin.infolist():
        if drop.match(info.filename):
            dropped.append((info.filename, info.file_size))
            continue
        if info.filename.endswith(".dist-info/RECORD"):
            record = info
            continue
        zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_DEFLATED)
    names = {n for n, _ in dropped}
    lines = [l for l in zin.read(record).decode().splitlines() if l and l.split(",")[0] not in names]
    zout.writestr(record, "\n".join(lines) + "\n", compress_type=zipfile.ZIP_DEFLATED)
os.replace(out, src)
for n, s in dropped:
    print(f"slimmed sglang-kernel: dropped {n} ({s / 2**20:.0f} MiB unpacked)")
print(f"sglang-kernel wheel now {os.path.getsize(src) / 2**20:.1f} MiB")
EOF

(cd "$tmp" && tar cf w.tar sgw && split -b 60M -d -a 1 w.tar piece.)
rm -rf "$dir"; for f in "$tmp"/piece.*; do i=${f##*.}; mkdir -p "$dir/p$i"; mv "$f" "$dir/p$i/"; done
sha256sum "$tmp/w.tar" | cut -c1-64 > "$dir/sha256"
echo "wheels: $(ls "$tmp/sgw" | wc -l), $(du -sm "$tmp/sgw" | cut -f1) MiB"
echo "pieces: $(ls "$dir" | grep -c '^p') in $dir (tar sha256 $(cat "$dir/sha256"))"
