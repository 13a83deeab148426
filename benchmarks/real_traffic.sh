#!/bin/bash
# Real traffic must-shows (benchmarks/RESULTS.md, "Real traffic"): run under the heavy lock,
#   flock /tmp/satpoint-heavy.lock benchmarks/real_traffic.sh /tmp/real-traffic
# 1. burst sensitivity: the saturation point of the sim (4 slots x 10 ms = 400 rps) per arrival process
# 2. the seeded synthetic trace replayed against the same sim at speeds 4 and 8
set -u
OUT=${1:-/tmp/real-traffic}
mkdir -p "$OUT"
timeout 480 satpoint sweep --server sim --workers 4 --service-ms 10 --set arrival=constant,poisson,gamma:4 \
    --repeats 1 --remeasure-top 0 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1
echo "sweep rc=$?"
python benchmarks/trace_synth.py --out "$OUT/trace.csv"
taskset -c 0 satpoint sim --port 18431 --slots 4 --service-ms 10 > "$OUT/sim.log" 2>&1 &
SIM=$!
sleep 2
for SPEED in 4 8; do
  timeout 420 satpoint run --url http://127.0.0.1:18431 --model sim --trace "$OUT/trace.csv" --speed $SPEED \
     --generator-cpus 1 --no-html --out "$OUT/trace-x$SPEED" > "$OUT/trace-x$SPEED.log" 2>&1
  echo "trace speed $SPEED rc=$?"
done
kill $SIM
wait $SIM
