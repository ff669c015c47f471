#!/usr/bin/env bash
# Capture runs that end early (workloads.py) on a GPU machine and export each to SQLite, the
# workload's truth (JSON lines) beside it. nsys 2025.3 from the project's device kit (source
# .device-kit/nsys-env.sh first); OLD_NSYS=path/to/nsys (2023.4) for the old-* captures, which
# leave a .qdstrm (the target package has no importer: import it on the host with the
# matching nsight-systems package's QdstrmImporter, then export with that nsys).
#   bash capture.sh OUTDIR [NAME...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture.sh OUTDIR [NAME...]}; shift
mkdir -p "$out"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(healthy exception exception-bare killed killed-bare duration duration-bare range range-bare delay-bare)
base=(--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true)
run() {  # NAME MODE [nsys options...]: one capture; KILL_AFTER=s kills the workload (-9) s after its loop starts
  local name=$1 mode=$2; shift 2
  local nsys_bin=nsys bare=0
  [[ $name == old-* ]] && nsys_bin=${OLD_NSYS:?set OLD_NSYS for $name}
  [[ $name == *-bare ]] && bare=1
  local truth="$out/h100-$name.truth.jsonl"
  rm -f "$truth" "$truth.started"
  echo "== h100-$name: NO_NVTX=$bare $nsys_bin profile ${base[*]} $* python3 workloads.py $mode"
  if [ -n "${KILL_AFTER:-}" ]; then
    ( while [ ! -e "$truth.started" ]; do sleep 0.1; done; sleep "$KILL_AFTER"
      pid=$(head -1 "$truth" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
      kill -9 "$pid" && echo "   SIGKILL sent to $pid" ) &
  fi
  NO_NVTX=$bare $nsys_bin profile "${base[@]}" "$@" -o "$out/h100-$name" python3 "$here/workloads.py" "$mode" "$truth" > "$out/h100-$name.log" 2>&1
  echo "   nsys exit $?"
  wait
  if [ -e "$out/h100-$name.nsys-rep" ]; then
    nsys export --type sqlite --force-overwrite true -o "$out/h100-$name.sqlite" "$out/h100-$name.nsys-rep" > /dev/null 2>&1
    rm -f "$out/h100-$name.nsys-rep"
  fi
  ls -la "$out/h100-$name"* 2>/dev/null
}
for name in "${names[@]}"; do
  case $name in
    healthy) run healthy healthy ;;
    exception|exception-bare) run "$name" exception ;;
    killed|killed-bare) KILL_AFTER=3 run "$name" long ;;
    duration|duration-bare) run "$name" long --duration=14 ;;
    range|range-bare) run "$name" range --capture-range=cudaProfilerApi --capture-range-end=stop ;;
    delay-bare) run "$name" long --delay=12 --duration=4 ;;
    old-eager) run old-eager eager ;;
    old-graph) run old-graph graph ;;
    *) echo "unknown capture $name" ;;
  esac
done
