#!/bin/bash
# A 10-million-row trace (benchmarks/RESULTS.md, "Real traffic: measured against a simple queue"): written,
# read with its busiest 2 minutes found, its whole schedule streamed (peak RSS of each), and the busiest
# 2 minutes replayed with --procs 2 against the sim (16 slots x 10 ms). Under the heavy lock:
#   flock /tmp/satpoint-heavy.lock benchmarks/trace_10m.sh /tmp/trace10m
set -u
OUT=${1:-/tmp/trace10m}
mkdir -p "$OUT"
python benchmarks/trace_10m.py gen "$OUT/trace.csv"
ls -la "$OUT/trace.csv"
/usr/bin/time -v python benchmarks/trace_10m.py plan "$OUT/trace.csv" 2m > "$OUT/plan-peak.log" 2>&1
grep -E "plan:|busiest|Maximum resident" "$OUT/plan-peak.log"
/usr/bin/time -v python benchmarks/trace_10m.py plan "$OUT/trace.csv" > "$OUT/plan-all.log" 2>&1
grep -E "plan:|Maximum resident" "$OUT/plan-all.log"
taskset -c 0 satpoint sim --port 18433 --slots 16 --service-ms 10 > "$OUT/sim.log" 2>&1 &
SIM=$!
sleep 2
/usr/bin/time -v timeout 400 satpoint run --url http://127.0.0.1:18433 --model sim --trace "$OUT/trace.csv" \
  --trace-peak 2m --trace-stage-s 30 --procs 2 --no-html --out "$OUT/replay" > "$OUT/replay.log" 2>&1
echo "replay rc=$?"
grep -E "Maximum resident|Elapsed" "$OUT/replay.log"
kill $SIM
wait $SIM
