#!/usr/bin/env bash
# Captures that open or close while GPU work is in flight: delayed, time-limited and
# cudaProfilerStart/Stop capture ranges of a busy loop (../steady/workloads.py long_async,
# long_range), exported to SQLite, with what NVIDIA's own `nsys stats` counts beside each
# (cuda_gpu_kern_sum, cuda_gpu_mem_time_sum as CSV): the truth nsightlab's counts must equal.
#   bash capture.sh OUTDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR}
mkdir -p "$out"
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
run() {  # NAME MODE nsys-options...
  local name=$1 mode=$2; shift 2
  echo "== $name: nsys profile ${base[*]} $* python3 workloads.py $mode"
  nsys profile "${base[@]}" "$@" -o "$out/$name" python3 "$here/../steady/workloads.py" "$mode" "$out/$name.truth.json" > "$out/$name.log" 2>&1
  echo "   exit $?"
  nsys export --type sqlite --force-overwrite true -o "$out/$name.sqlite" "$out/$name.nsys-rep" > /dev/null 2>&1
  for r in cuda_gpu_kern_sum cuda_gpu_mem_time_sum; do
    nsys stats --report $r --format csv --force-export=false -o "$out/$name" "$out/$name.sqlite" > /dev/null 2>&1
  done
  rm -f "$out/$name.nsys-rep"
  ls -la "$out/$name"*
}
run h100-delayed long_async --delay=12
run h100-duration long_async --duration=14
run h100-delayed-duration long_async --delay=12 --duration=3
run h100-profiler-range long_range --capture-range=cudaProfilerApi --capture-range-end=stop
