#!/usr/bin/env bash
# Capture the workloads of workloads.py on a GPU machine with nsys 2025.3 (the device kit:
# source .device-kit/nsys-env.sh first), export each to SQLite (OS runtime tables dropped) and
# keep the workload's own truth beside it.
#   bash capture.sh OUTDIR SPEC...
# SPEC is NAME:MODE[:ARG[:HOW]]; HOW is 'node' (--cuda-graph-trace=node; else nsys's default,
# graph level) or 'ddp' (two ranks under torchrun, one report of the whole job).
# WORKLOADS=PATH runs another workloads file (tests/data/shapes uses this script);
# NSYS_EXTRA adds nsys profile options (e.g. "--delay=20 --duration=1": a slice).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR SPEC...}; shift
mkdir -p "$out"
t0=$SECONDS
for spec in "$@"; do
  IFS=: read -r name mode arg how <<< "$spec"
  [ $((SECONDS - t0)) -gt "${BUDGET_S:-480}" ] && { echo "== out of time before $name"; break; }
  base=(--trace=cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite=true)
  [ "$how" = node ] && base+=(--cuda-graph-trace=node)
  [ -n "${NSYS_EXTRA:-}" ] && base+=($NSYS_EXTRA)
  wl=${WORKLOADS:-$here/workloads.py}
  run=(python3 "$wl" "$mode" "$out/$name.truth.json" ${arg:+"$arg"})
  [ "$how" = ddp ] && run=(python3 -m torch.distributed.run --nproc_per_node=2 "$wl"
                           "$mode" "$out/$name.truth.json" ${arg:+"$arg"})
  echo "== $name: $mode ${arg:-} ${how:-} (after $((SECONDS - t0)) s)"
  nsys profile "${base[@]}" -o "$out/$name" "${run[@]}" > "$out/$name.log" 2>&1
  echo "   exit $?"
  nsys export --type sqlite --force-overwrite true -o "$out/$name.sqlite" "$out/$name.nsys-rep" > /dev/null 2>&1
  rm -f "$out/$name.nsys-rep"
  python3 - "$out/$name.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for t in ("OSRT_API", "OSRT_CALLCHAINS", "SCHED_EVENTS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS",
          "PROFILER_OVERHEAD", "CUDA_CALLCHAINS"):
    db.execute(f"DROP TABLE IF EXISTS {t}")
db.commit(); db.execute("VACUUM"); db.close()
PY
  ls -la "$out/$name.sqlite" 2>/dev/null | awk '{print "   " $5 " bytes"}'
done
