#!/usr/bin/env bash
# Capture the triage scenarios (scenarios.py) on a GPU machine with nsys 2025.3, export each to
# SQLite and keep what NVIDIA's `nsys stats` prints for it (expected/<name>/*.csv).
#   bash capture.sh OUTDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR}
mkdir -p "$out"
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node --force-overwrite=true)
run() {  # name, extra nsys flags..., -- mode
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  echo "== $name: nsys profile ${base[*]} ${flags[*]} python3 scenarios.py $*"
  nsys profile "${base[@]}" "${flags[@]}" -o "$out/$name" python3 "$here/scenarios.py" "$@" > "$out/$name.log" 2>&1
  echo "   exit $?"
  nsys export --type sqlite --force-overwrite true -o "$out/$name.sqlite" "$out/$name.nsys-rep" > /dev/null 2>&1
  mkdir -p "$out/expected/$name"
  nsys stats -q --force-overwrite true -f csv -r cuda_gpu_mem_time_sum,cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum \
    -o "$out/expected/$name/stats" "$out/$name.sqlite" > /dev/null 2>&1
  rm -f "$out/$name.nsys-rep"
}
for m in ${MODES:-h2d_pinned h2d_pageable d2h compute host sync sync_work launch graph overlap warmup crash}; do
  run "$m" -- "$m"
done
[ -n "${MODES:-}" ] && exit 0  # only the modes asked for
run compute-gpumetrics --gpu-metrics-devices=all -- compute
run h2d_pageable-gpumetrics --gpu-metrics-devices=all -- h2d_pageable
# GPU metrics but no CUDA trace: activity the kernel trace does not hold
sed_base=("${base[@]}"); base=(--trace=nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
run notrace-gpumetrics --gpu-metrics-devices=all -- compute
base=("${sed_base[@]}")
ls -la "$out"
