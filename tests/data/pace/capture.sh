#!/usr/bin/env bash
# Capture the loops of workloads.py on a GPU machine with nsys 2025.3 (the project's device
# kit: source .device-kit/nsys-env.sh first), export each to SQLite (OS runtime tables
# dropped) and keep the workload's own truth beside it.
#   bash capture.sh OUTDIR SPEC...
# SPEC is NAME:MODE[:ITERS[:HOW]]; HOW is 'bare' (no NVTX), 'load' (32 busy CPU processes
# beside the run: the host's pace moves) or 'hog' (an untraced process doing GEMMs on the
# same GPU during the run). Pairs meant to be compared are listed in alternation (A B A B).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR SPEC...}; shift
mkdir -p "$out"
base=(--trace=cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite=true)
t0=$SECONDS
for spec in "$@"; do
  IFS=: read -r name mode n how <<< "$spec"
  [ $((SECONDS - t0)) -gt "${BUDGET_S:-500}" ] && { echo "== out of time before $name"; break; }
  pids=()
  case "$how" in
    load) for _ in $(seq 32); do python3 -c 'while True: pass' & pids+=($!); done ;;
    hog) python3 "$here/workloads.py" hog /dev/null 600 & pids+=($!); sleep 6 ;;
  esac
  bare=0; [ "$how" = bare ] && bare=1
  echo "== $name: $mode ${n:-} ${how:-} (after $((SECONDS - t0)) s)"
  NO_NVTX=$bare nsys profile "${base[@]}" -o "$out/$name" python3 "$here/workloads.py" "$mode" \
    "$out/$name.truth.json" $n > "$out/$name.log" 2>&1
  echo "   exit $?"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null
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
