#!/usr/bin/env bash
# Capture the loops of workloads.py on a GPU machine with nsys 2025.3 (plain `nsys profile`: no
# iteration ranges, nsys's default graph-level CUDA graph tracing), export each to SQLite and
# keep the workload's own truth (CUDA events around every iteration) beside it.
#   bash capture.sh OUTDIR [MODE...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR [MODE...]}; shift
mkdir -p "$out"
modes=("$@"); [ ${#modes[@]} -gt 0 ] || modes=(decode train graph graph-node serve infer_sync infer_async killed nvtx_warmup autotune compile gpumetrics)
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
t0=$SECONDS
for name in "${modes[@]}"; do
  [ $((SECONDS - t0)) -gt "${BUDGET_S:-420}" ] && { echo "== out of time before $name"; break; }
  mode=$name; extra=()
  case "$name" in
    graph-node) mode=graph; extra=(--cuda-graph-trace=node);;
    gpumetrics) mode=infer_sync; extra=(--gpu-metrics-devices=all --gpu-metrics-frequency=2000);;
  esac
  echo "== h100-$name: nsys profile ${base[*]} ${extra[*]} python3 workloads.py $mode"
  nsys profile "${base[@]}" "${extra[@]}" -o "$out/h100-$name" python3 "$here/workloads.py" "$mode" "$out/h100-$name.truth.json" > "$out/h100-$name.log" 2>&1
  echo "   exit $? after $((SECONDS - t0)) s"
  nsys export --type sqlite --force-overwrite true -o "$out/h100-$name.sqlite" "$out/h100-$name.nsys-rep" > /dev/null 2>&1
  rm -f "$out/h100-$name.nsys-rep"
  ls -la "$out/h100-$name.sqlite" 2>/dev/null
done
