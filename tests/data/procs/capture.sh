#!/usr/bin/env bash
# The several-processes test set (issue 48) on a two-GPU machine (nsys 2025.3 on PATH):
# processes sharing one GPU (with each run alone for the solo truth, and under MPS if it starts),
# DDP ranks (balanced, a straggler, unequal batches; one report for the job and one per rank)
# and tensor-parallel style all-reduces. Each report is exported to SQLite; truth beside it.
# The stretch set (phase "stretch", one GPU): processes sharing GPU 0 in rounds, each alone then
# all together (workloads.py shared), so the solo truth is in the same trace as the shared one.
# The graph set (phase "graph", one GPU): the same rounds with CUDA graphs replayed under nsys's
# default graph-level trace, once around everything and once from cudaProfilerStart on (no
# eager kernel in the trace: each process's GPU work is graph executions only).
#   bash capture.sh OUT share|ddp|stretch|stretch2|graph|tpdp
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUT PHASE}; phase=${2:?phase}
mkdir -p "$out"
W="python3 $here/workloads.py"
prof() { local name=$1; shift; local t0=$SECONDS
  nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true \
    -o "$out/$name" "$@" > "$out/$name.log" 2>&1; echo "== $name: nsys exit $? in $((SECONDS-t0)) s"
  nsys export --type sqlite --force-overwrite true -o "$out/$name.sqlite" "$out/$name.nsys-rep" > /dev/null 2>&1
  rm -f "$out/$name.nsys-rep"; }
case $phase in
  share)
    for m in vit_s resnet50 resnet18; do $W infer $m 5 20 "$out/solo-$m.jsonl" 0; done
    export START_AT
    START_AT=$(( $(date +%s) + 20 )); prof share2 bash -c "$W infer vit_s 5 20 $out/share2-a.jsonl 0 & $W infer vit_s 5 20 $out/share2-b.jsonl 0 & wait"
    START_AT=$(( $(date +%s) + 25 )); prof share3 bash -c "$W infer vit_s 5 20 $out/share3-vit_s.jsonl 0 & $W infer resnet50 5 20 $out/share3-resnet50.jsonl 0 & $W infer resnet18 5 20 $out/share3-resnet18.jsonl 0 & wait"
    if command -v nvidia-cuda-mps-control > /dev/null; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      if nvidia-cuda-mps-control -d; then
        echo "MPS started"
        START_AT=$(( $(date +%s) + 20 )); prof mps2 bash -c "$W infer vit_s 5 20 $out/mps2-a.jsonl 0 & $W infer vit_s 5 20 $out/mps2-b.jsonl 0 & wait"
        echo quit | nvidia-cuda-mps-control; echo "MPS stopped"
      else echo "MPS: nvidia-cuda-mps-control -d failed" | tee "$out/mps.txt"; fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else echo "MPS: nvidia-cuda-mps-control not found" | tee "$out/mps.txt"; fi ;;
  stretch)
    sh="$W shared"
    prof st-vit2 $sh vit_s,vit_s 5 2 10 15 "$out/st-vit2"
    prof st-mix3 $sh vit_s,resnet50,resnet18 5 2 10 15 "$out/st-mix3"
    prof st-big-small $sh resnet50:128,resnet18:1 5 2 10 15 "$out/st-big-small"
    if command -v nvidia-cuda-mps-control > /dev/null; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      if nvidia-cuda-mps-control -d; then
        prof st-mps2 $sh vit_s,resnet18 5 2 10 15 "$out/st-mps2"
        echo quit | nvidia-cuda-mps-control
      fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi ;;
  stretch2)  # two GPU-bound processes time-sliced; GPU-bound beside launch-bound under MPS
    sh="$W shared"
    prof st-big2 $sh resnet50:128,resnet50:128 5 2 10 15 "$out/st-big2"
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    if nvidia-cuda-mps-control -d; then
      prof st-mps-big-small $sh resnet50:128,resnet18:1 5 2 10 15 "$out/st-mps-big-small"
      prof st-mps-big2 $sh resnet50:128,resnet50:128 5 2 10 15 "$out/st-mps-big2"
      echo quit | nvidia-cuda-mps-control
    fi ;;
  graph)
    sh="$W shared"
    prof st-graph2 $sh resnet18:8@graph,vit_s:8@graph 5 2 10 15 "$out/st-graph2"
    prof st-graph-mix $sh resnet50:32@graph,resnet18:8 5 2 10 15 "$out/st-graph-mix"
    export PROFILE_RANGE=1
    prof st-graph2-range --capture-range=cudaProfilerApi $sh resnet18:8@graph,vit_s:8@graph 5 2 10 15 "$out/st-graph2-range"
    unset PROFILE_RANGE ;;
  tpdp)  # four GPUs: TP pairs and DP pairs, rank 3 slow
    unset START_AT
    prof ddp-tpdp timeout 300 python3 -m torch.distributed.run --nproc_per_node=4 $here/workloads.py ddp tpdp 5 20 "$out/ddp-tpdp" ;;
  ddp)
    unset START_AT
    for mode in balanced straggler unequal tp; do
      prof ddp-$mode python3 -m torch.distributed.run --nproc_per_node=2 $here/workloads.py ddp $mode 5 20 "$out/ddp-$mode"
    done
    # one report per rank, as nsys profile -o rank_%q{RANK} under torchrun
    cat > /tmp/perrank.sh <<EOS
#!/bin/bash
exec nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true -o $out/rank-straggler-\$RANK python3 $here/workloads.py ddp straggler 5 20 $out/rank-straggler
EOS
    chmod +x /tmp/perrank.sh; t0=$SECONDS
    python3 -m torch.distributed.run --nproc_per_node=2 --no-python /tmp/perrank.sh > "$out/rank-straggler.log" 2>&1
    echo "== rank-straggler: exit $? in $((SECONDS-t0)) s"
    for r in 0 1; do nsys export --type sqlite --force-overwrite true -o "$out/rank-straggler-$r.sqlite" "$out/rank-straggler-$r.nsys-rep" > /dev/null 2>&1; rm -f "$out/rank-straggler-$r.nsys-rep"; done ;;
esac
ls -la "$out"
