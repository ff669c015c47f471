#!/bin/bash
# Captures the kernel-level cases: truth (plain run), ncu --set full of the profiled call; the
# ViT-S loop under nsys, then ncu of one steady iteration (one launch per launch config).
set -x
source .device-kit/nsys-env.sh >/dev/null 2>&1
W=.device-kit/workloads/kernel_cases.py
D=/tmp/kc; rm -rf $D; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $D/gpu.csv
for c in gemm_fp16 gemm_fp8 m16_fp16 m16_fp8 wo_fp8 gather scan; do
  python $W $c $D/$c.truth.json
  ncu --set full --nvtx --nvtx-include "$c/" --force-overwrite --export $D/$c python $W $c > $D/$c.ncu.log 2>&1
done
python $W vits $D/vits.truth.json
nsys profile -t cuda,nvtx -o $D/vits --force-overwrite true python $W vits $D/vits.nsys-truth.json > $D/vits.nsys.log 2>&1
nsys export --type sqlite -o $D/vits.sqlite $D/vits.nsys-rep >> $D/vits.nsys.log 2>&1
ncu --set full --nvtx --nvtx-include "iter10/" --filter-mode per-launch-config --launch-count 1 \
    --force-overwrite --export $D/vits python $W vits $D/vits.ncu-truth.json > $D/vits.ncu.log 2>&1
ncu --nvtx --nvtx-include "iter10/" --launch-count 12 --force-overwrite --export $D/vits-basic \
    python $W vits > $D/vits-basic.ncu.log 2>&1
ls -la $D
rm -f $D/*.nsys-rep
cd /tmp && tar -cf - kc | xz -T16 -6 > $OUT/kc.tar.xz
ls -la $OUT
