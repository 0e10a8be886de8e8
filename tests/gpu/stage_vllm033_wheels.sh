#!/usr/bin/env bash
# Stage vLLM 0.33.0, its torch 2.14.0 and SGLang 0.5.17 for the lent one-GPU machine, in pieces that each fit
# one device call (64 MiB carry): tests/gpu/deploy_v033_on_gpu.sh assembles them there.
# Usage (from the project root): tests/gpu/stage_vllm033_wheels.sh [DIR]   (DIR defaults to .stage/v033)
# Lists (beside this script):
#   torch-2.14.0-overlay-wheels.txt  -> t/    torch, triton, NCCL, torchvision for the /opt/torch214 overlay
#   vllm-0.33.0-gpu-wheels.txt       -> w/    ml_env's exact wheelhouse for vLLM 0.33.0 (vllm wheel slimmed)
#   sglang-0.5.17-deps-wheels.txt    -> sgd/  SGLang's dependencies where the 0.22 run's versions differ
#   sglang-0.5.17-gpu-wheels.txt     -> sgw/  SGLang itself (sglang-kernel slimmed, as stage_sglang_wheels.sh does)
# plus sgl-wheels.txt (the file names of SGLang's wheelhouse, taken from w/, sgd/ and sgw/).
# The tar of those folders is split into 60 MiB pieces DIR/pNN/piece.NN (split -a 2: up to 100 pieces, where
# ../shared/tools/stage-gpu-wheels' -a 1 stops at 10) and DIR/sha256. On the machine, one call per piece, back to
# back (it is given back 30 s after a call):
#   run(command="mkdir -p /tmp/st3 && cp .stage/v033/pNN/piece.NN /tmp/st3/", carry=[".stage/v033/pNN"])
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-.stage/v033}
tmp=${STAGE_TMP:-$(mktemp -d)}
mkdir -p "$tmp"
dl() {  # dl LIST FOLDER
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $(for n in $(seq 5 39); do echo --platform manylinux_2_${n}_x86_64; done) \
    --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 \
    -d "$tmp/$2" -r "$1"
}
dl "$here/torch-2.14.0-overlay-wheels.txt" t
dl "$here/vllm-0.33.0-gpu-wheels.txt" w
dl "$here/sglang-0.5.17-deps-wheels.txt" sgd
dl "$here/sglang-0.5.17-gpu-wheels.txt" sgw

# Drop files from a wheel: same name and version, the files taken out of the archive and of RECORD.
slim() {  # slim WHEEL REGEX
  python3 - "$1" "$2" <<'EOF'
import os, re, sys, zipfile
src, drop = sys.argv[1], re.compile(sys.argv[2])
out = src + ".slim"
dropped = []
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
    record = None
    for info in zin.infolist():
        if drop.match(info.filename):
            dropped.append((info.filename, info.file_size))
        elif info.filename.endswith(".dist-info/RECORD"):
            record = info
        else:
            zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_DEFLATED)
    names = {n for n, _ in dropped}
    lines = [line for line in zin.read(record).decode().splitlines() if line and line.split(",")[0] not in names]
    zout.writestr(record, "\n".join(lines) + "\n", compress_type=zipfile.ZIP_DEFLATED)
os.replace(out, src)
for n, s in dropped:
    print(f"slimmed {os.path.basename(src)}: dropped {n} ({s / 2**20:.0f} MiB unpacked)")
print(f"{os.path.basename(src)} now {os.path.getsize(src) / 2**20:.1f} MiB")
EOF
}
# vLLM: FA2 (FA3 serves SM 9.0; see vllm-0.33.0-gpu-wheels.txt) and the opt-in Rust frontend.
slim "$(ls "$tmp"/w/vllm-0.33.0-*.whl)" '^vllm/(vllm_flash_attn/_vllm_fa2_C[^/]*\.so|vllm-rs)$'
# sglang-kernel: FA3, SM100 and the lazily loaded InfLLM-V2 and FlashMLA ops (stage_sglang_wheels.sh says why).
slim "$(ls "$tmp"/sgw/sglang_kernel-*.whl)" \
  '^sgl_kernel/(sm100/.*|infllm_ops[^/]*\.so|flashmla_ops[^/]*\.so|flash_ops[^/]*\.so)$'

# SGLang's wheelhouse: every name of the 0.22 list but vllm, from sgd/ where its version differs, else from w/.
python3 - "$tmp" /dev/stdin >"$tmp/sgl-wheels.txt" <<'EOF'
import re, sys
from pathlib import Path
tmp = Path(sys.argv[1])
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
def names(folder):
    return {norm(p.name.split("-")[0]): f"{folder}/{p.name}" for p in (tmp / folder).glob("*.whl")}
w, sgd, sgw = names("w"), names("sgd"), names("sgw")
# The 0.22 run's names (../shared/tools/vllm-0.22.0-gpu-wheels.txt) minus vllm and tokenspeed-mla (gguf comes from sgd/).
keep = set(w) | set(sgd)
keep -= {"vllm", "oss-harmony", "nvtx", "instanttensor", "humming-kernels", "torch-c-dlpack-ext", "nccl4py",
         "nccl-extensions", "cuda-tile", "orjson", "pyelftools"}
for name in sorted(keep):
    print(sgd.get(name) or w[name])
for name in sorted(sgw):
    print(sgw[name])
EOF
echo "SGLang wheelhouse: $(wc -l <"$tmp/sgl-wheels.txt") wheels"

(cd "$tmp" && tar cf w.tar t w sgd sgw sgl-wheels.txt && split -b 60M -d -a 2 w.tar piece.)
rm -rf "$dir"; for f in "$tmp"/piece.*; do i=${f##*.}; mkdir -p "$dir/p$i"; mv "$f" "$dir/p$i/"; done
sha256sum "$tmp/w.tar" | cut -c1-64 >"$dir/sha256"
for d in t w sgd sgw; do echo "$d: $(ls "$tmp/$d" | wc -l) wheels, $(du -sm "$tmp/$d" | cut -f1) MiB"; done
echo "pieces: $(ls "$dir" | grep -c '^p') in $dir (tar sha256 $(cat "$dir/sha256"))"
[ -n "${STAGE_TMP:-}" ] || rm -rf "$tmp"
