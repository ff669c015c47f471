#!/usr/bin/env bash
# Capture the model fixtures (workloads.py) on a GPU machine with nsys 2025.3 and ncu, export to
# SQLite and keep what NVIDIA's `nsys stats` prints for each (expected/<name>/*.csv).
#   bash capture.sh OUTDIR [RUN...]     RUN: e.g. resnet50:fp16; default: all of them
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR [MODEL:PRECISION...]}; shift
mkdir -p "$out"
runs=("$@"); [ ${#runs[@]} -gt 0 ] || runs=(resnet50:fp32 resnet50:fp16 resnet50:bf16 gpt:fp16 gpt:bf16 gpt-graphs:fp16 gpt-compile:bf16)
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
for r in "${runs[@]}"; do
  model=${r%%:*}; prec=${r##*:}; name="h100-$model-$prec"
  extra=(); case "$model" in gpt-graphs|graphs*|leak) extra=(--cuda-memory-usage=true --cuda-graph-trace=node);; esac
  # autotuning launches thousands of benchmark kernels: record from cudaProfilerStart on
  [ "$model" = gpt-compile ] && extra=(--capture-range=cudaProfilerApi --capture-range-end=stop)
  echo "== $name: nsys profile ${base[*]} ${extra[*]} python3 workloads.py $model $prec"
  nsys profile "${base[@]}" "${extra[@]}" -o "$out/$name" python3 "$here/workloads.py" "$model" "$prec" > "$out/$name.log" 2>&1
  echo "   exit $?"
  nsys export --type sqlite --force-overwrite true -o "$out/$name.sqlite" "$out/$name.nsys-rep" > /dev/null 2>&1
  mkdir -p "$out/expected/$name"
  nsys stats -q --force-overwrite true -f csv -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum -o "$out/expected/$name/stats" "$out/$name.sqlite" > /dev/null 2>&1
  rm -f "$out/$name.nsys-rep"
  if [ "$model" = gpt-compile ] && [ -z "${NO_NCU:-}" ]; then
    # the Triton kernels of one iteration with the per-type tensor-pipe counters
    m=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
    for t in fp16 bf16_dst_fp32 tf32_dst_fp32 fp8_sparsity_off int8 fp64; do m+=",sm__ops_path_tensor_src_$t.sum"; done
    echo "== $name: ncu --metrics ... --nvtx --nvtx-include iter1/"
    ncu --metrics "$m" --nvtx --nvtx-include "iter1/" -f -o "$out/$name" python3 "$here/workloads.py" "$model" "$prec" 3 > "$out/$name.ncu.log" 2>&1
    echo "   exit $?"
  fi
done
ls -la "$out"
