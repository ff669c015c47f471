#!/usr/bin/env bash
# Capture the loops of workloads.py on a GPU machine with nsys 2025.3 (plain `nsys profile`,
# the project's device kit: source .device-kit/nsys-env.sh first), export each to SQLite and
# keep the workload's own truth beside it.
#   bash capture.sh OUTDIR [MODE...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR [MODE...]}; shift
mkdir -p "$out"
modes=("$@"); [ ${#modes[@]} -gt 0 ] || modes=(periodic_d2h periodic_bare phase drift drift_copy alternating alternating_vit hiccup eval_every checkpoint deit_fp16 deit_bf16 hf_s32 hf_l64 hf_s64 hf_l32)
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
t0=$SECONDS
for name in "${modes[@]}"; do
  [ $((SECONDS - t0)) -gt "${BUDGET_S:-420}" ] && { echo "== out of time before $name"; break; }
  mode=${name%-bare}; bare=0; [ "$mode" != "$name" ] && bare=1
  echo "== h100-$name: NO_NVTX=$bare nsys profile ${base[*]} python3 workloads.py $mode"
  NO_NVTX=$bare nsys profile "${base[@]}" -o "$out/h100-$name" python3 "$here/workloads.py" "$mode" "$out/h100-$name.truth.json" > "$out/h100-$name.log" 2>&1
  echo "   exit $? after $((SECONDS - t0)) s"
  nsys export --type sqlite --force-overwrite true -o "$out/h100-$name.sqlite" "$out/h100-$name.nsys-rep" > /dev/null 2>&1
  rm -f "$out/h100-$name.nsys-rep"
  ls -la "$out/h100-$name.sqlite" 2>/dev/null
done
