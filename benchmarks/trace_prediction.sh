#!/bin/bash
# The queue prediction beside the replay (issue 21 item 4, benchmarks/RESULTS.md "Real traffic: measured
# against a simple queue"): the seeded synthetic trace replayed against the sim (4 slots x 10 ms) at speeds
# 2 (the middle 4 minutes), 3 and 4 (the whole 10), with --server-slots 4. Run under the heavy lock:
#   flock /tmp/satpoint-heavy.lock benchmarks/trace_prediction.sh /tmp/trace-prediction
set -u
OUT=${1:-/tmp/trace-prediction}
mkdir -p "$OUT"
python benchmarks/trace_synth.py --out "$OUT/trace.csv"
taskset -c 0 satpoint sim --port 18432 --slots 4 --service-ms 10 > "$OUT/sim.log" 2>&1 &
SIM=$!
sleep 2
run() {  # SPEED NAME [extra options]
  local speed=$1 name=$2; shift 2
  timeout 400 satpoint run --url http://127.0.0.1:18432 --model sim --trace "$OUT/trace.csv" --speed "$speed" \
     --server-slots 4 --generator-cpus 1 --no-html --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?"
}
run 2 x2 --trace-window 3m..7m   # the middle 4 minutes (the rate's top), 120 s of run
run 3 x3                         # the whole 10 minutes, 200 s
run 4 x4                         # the whole 10 minutes, 150 s
kill $SIM
wait $SIM
