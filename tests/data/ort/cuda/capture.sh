#!/usr/bin/env bash
# The runtime test set (issue 47) on the GPU machine: the same models run by ONNX Runtime's CUDA EP
# (nsightlab's runner: NumPy inputs, io_binding, enable_cuda_graph, ORT's profiler on and off) and by
# PyTorch (eager, torch.compile), plus a plain CUDA program (cuBLAS through ctypes), each captured
# with `nsightlab capture`; the workloads' own truth beside them.
#   bash capture.sh STORE models|torch|ort|truth      (nsys 2025.3 on PATH, onnxruntime-gpu importable)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
store=${1:?usage: capture.sh STORE PHASE}; phase=${2:?phase}
mkdir -p "$store/models" "$store/truth"
M=$store/models; T=$store/truth
bert_shapes=(--shape input_ids=8x128 --shape attention_mask=8x128 --shape token_type_ids=8x128)
cap() { local name=$1; shift; echo "== $name: $*"; local t0=$SECONDS
  python3 -m nsightlab.cli capture "$name" --store "$store" --force "$@" > "$store/$name.out" 2>&1
  echo "   exit $? in $((SECONDS-t0)) s"; tail -3 "$store/$name.out"; }
case $phase in
  models)
    for m in bert4 bert12 resnet18 resnet18-fp16; do
      python3 "$here/workloads.py" export $m "$M/$m.onnx" 2>&1 | tail -1; done; ls -la "$M" ;;
  torch)
    cap bert4-eager -- python3 "$here/workloads.py" torch bert4 eager 30 "$T/bert4-eager.jsonl"
    cap bert4-compile -- python3 "$here/workloads.py" torch bert4 compile 30 "$T/bert4-compile.jsonl"
    cap bert12-eager -- python3 "$here/workloads.py" torch bert12 eager 30 "$T/bert12-eager.jsonl"
    cap resnet18-eager -- python3 "$here/workloads.py" torch resnet18 eager 30 "$T/resnet18-eager.jsonl"
    cap cublas -- python3 "$here/workloads.py" cublas 30 "$T/cublas.jsonl" ;;
  ort)
    cap bert4-ort --ort "$M/bert4.onnx" --ep cuda "${bert_shapes[@]}" --iterations 20
    cap bert4-ort-iob --ort "$M/bert4.onnx" --ep cuda "${bert_shapes[@]}" --iterations 20 --io-binding
    cap bert4-ort-graph --ort "$M/bert4.onnx" --ep cuda "${bert_shapes[@]}" --iterations 20 --cuda-graph
    cap bert4-ort-plain -- python3 -m nsightlab.runners.ort "$M/bert4.onnx" --ep cuda "${bert_shapes[@]}" \
      --iterations 20 --report "$T/bert4-ort-plain.json"
    cap resnet18-ort --ort "$M/resnet18.onnx" --ep cuda --iterations 20
    cap resnet18-ort-graph --ort "$M/resnet18.onnx" --ep cuda --iterations 20 --cuda-graph
    cap resnet18-fp16-ort --ort "$M/resnet18-fp16.onnx" --ep cuda --iterations 20 --io-binding
    cap bert12-ort --ort "$M/bert12.onnx" --ep cuda "${bert_shapes[@]}" --iterations 20
    cap bert12-ort-iob --ort "$M/bert12.onnx" --ep cuda "${bert_shapes[@]}" --iterations 20 --io-binding ;;
  truth)  # the runner alone: no nsys; ORT's profiler off, then on
    for m in bert4 bert12; do for b in "" --io-binding; do
      for p in off on; do
        extra=(); [ $p = on ] && extra=(--profile "$T/$m${b:+-iob}-prof.json")
        python3 -m nsightlab.runners.ort "$M/$m.onnx" --ep cuda "${bert_shapes[@]}" --iterations 35 $b \
          "${extra[@]}" --report "$T/$m${b:+-iob}-profiler-$p.json" 2>&1 | tail -1
      done; done; done
    for m in resnet18 resnet18-fp16; do
      python3 -m nsightlab.runners.ort "$M/$m.onnx" --ep cuda --iterations 35 --report "$T/$m-ort.json" 2>&1 | tail -1
      python3 -m nsightlab.runners.ort "$M/$m.onnx" --ep cuda --iterations 35 --cuda-graph --report "$T/$m-ort-graph.json" 2>&1 | tail -1
    done ;;
esac
