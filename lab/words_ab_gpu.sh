#!/usr/bin/env bash
# A/B of 16-bit vectors moved as four 32-bit words (vload8, vstore8: one 16-byte access) against NVVM's two 8-byte
# ones: the same benches run with this checkout's autotune/kernels/intrinsics.py, then with the file given (the
# previous one), each compiling its own kernels (the kernel library's hash keys the code cache); the other file put
# back last. Every kernel is checked by its family's oracle before it is timed. The file before the words:
#   git show 1a306b8^:autotune/kernels/intrinsics.py > OLD_INTRINSICS
#   bash lab/words_ab_gpu.sh OLD_INTRINSICS RESULTS_DIR
set -uo pipefail
old=${1:?usage: bash lab/words_ab_gpu.sh OLD_INTRINSICS RESULTS_DIR}; out=${2:?}
mkdir -p "$out"; cp autotune/kernels/intrinsics.py "$out/intrinsics.py.words"
benches() {  # label
  python3 -m autotune bench --family matmul --dtype float16 --device 0 --shape 1024x1024x1024 --shape 4096x4096x4096 --shape 1x8192x8192 --out "$out/$1-matmul"
  python3 -m autotune bench --family reduce --op sum --axis 1 --dtype float16 --device 0 --shape 4096x4096 --out "$out/$1-sum"
}
benches words
cp "$old" autotune/kernels/intrinsics.py && benches halves
cp "$out/intrinsics.py.words" autotune/kernels/intrinsics.py
grep -H "^| autotune" "$out"/words-*/*.md "$out"/halves-*/*.md
