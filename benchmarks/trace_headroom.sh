#!/bin/bash
# find --trace must-shows (benchmarks/RESULTS.md, "find --trace: the headroom factor"), one lock hold each:
#   flock /tmp/satpoint-heavy.lock benchmarks/trace_headroom.sh constant /tmp/headroom
#   flock /tmp/satpoint-heavy.lock benchmarks/trace_headroom.sh bursty /tmp/headroom [run-name] [--no-profile]
# constant: 60 s of trace at exactly 100 rps (one request every 10 ms); bursty: trace_synth.py, 1 minute of
# Poisson arrivals at 100 rps with 3x bursts for 2 s every 30 s (seed 1).  Against `satpoint sim`, 4 slots x
# 10 ms constant (capacity 400 rps) on core 0, the generator on core 1; every process started here is
# stopped by its pid.
set -u
KIND=$1
OUT=${2:-/tmp/headroom}
NAME=${3:-$KIND}
EXTRA=${4:-}
mkdir -p "$OUT"
if [ "$KIND" = constant ]; then
  python -c "
t0 = 1_767_225_600.0
open('$OUT/constant.csv', 'w').write('timestamp\n' + ''.join(f'{t0 + k / 100:.6f}\n' for k in range(6000)))"
  TRACE=$OUT/constant.csv
else
  python benchmarks/trace_synth.py --out "$OUT/$NAME.csv" --minutes 1 --base 100 --peak 100 --burst 3 \
      --burst-s 2 --every 30 --seed 1
  TRACE=$OUT/$NAME.csv
fi
port=$((20000 + RANDOM % 20000))
taskset -c 0 satpoint sim --port "$port" --slots 4 --service-ms 10 > "$OUT/sim-$NAME.log" 2>&1 &
SIM=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
timeout 570 satpoint find --url "http://127.0.0.1:$port" --model sim --trace "$TRACE" --trace-stage-s 20 \
    --start-speed 1 --precision 0.05 --cooldown 1 --budget-s 540 --generator-cpus 1 --no-html $EXTRA \
    --emit-k8s "$OUT/$NAME-k8s" --out "$OUT/$NAME" > "$OUT/$NAME.log" 2>&1
echo "find --trace $NAME rc=$?"
kill $SIM
wait $SIM 2>/dev/null
