#!/usr/bin/env bash
# Streams with and without a CPU hog on the generator's core: the share of chunk gaps read together
# (stages[].stream.coalesced_share). sim on core 0, generator on core 1, the hog (40 s) on core 1 in "busy".
# Usage: flock /tmp/satpoint-heavy.lock bash benchmarks/stream_coalesced.sh
set -u
cd "$(dirname "$0")/.."
PORT=18931
taskset -c 0 satpoint sim --port $PORT --stream --slots 64 --stream-first-ms 5 --stream-gap-ms 2 --stream-chunks 20 >${TMPDIR:-/tmp}/sim.log 2>&1 &
SIM=$!
sleep 4
for mode in idle busy idle busy; do
  HOG=""
  if [ $mode = busy ]; then taskset -c 1 python -c "import time
t=time.monotonic()
while time.monotonic()-t<40: pass" & HOG=$!; fi
  out=${TMPDIR:-/tmp}/co-$mode-$RANDOM
  timeout 120 satpoint run -u http://127.0.0.1:$PORT -m sim --stream --stage 150:1:10 --generator-cpus 1 --out $out --no-html >${TMPDIR:-/tmp}/run.log 2>&1
  python - "$out" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
st = [x for x in s["stages"] if x.get("stream")][-1]["stream"]
print(sys.argv[2], "gap p50", st["gap_ms"]["p50"], "p99", st["gap_ms"]["p99"], "coalesced", st["coalesced_gaps"], "share", st["coalesced_share"], "streams", st["streams"])
PY
  if [ -n "$HOG" ]; then kill $HOG; wait $HOG 2>/dev/null; fi
done
kill $SIM; wait $SIM 2>/dev/null
