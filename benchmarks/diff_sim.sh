#!/usr/bin/env bash
# satpoint diff on the sim: one `find --repeats 3` per side against a sim of known capacity (slots / service).
# usage: benchmarks/diff_sim.sh OUT_DIR SLOTS SERVICE_MS   (run under the heavy lock: flock /tmp/satpoint-heavy.lock ...)
# The sim runs on core 0, the generator on core 1; every process started here is stopped by its pid.
set -euo pipefail
out=$1 slots=$2 service=$3
port=$((20000 + RANDOM % 20000))
taskset -c 0 python -m satpoint sim --port "$port" --slots "$slots" --service-ms "$service" >/dev/null 2>&1 &
sim=$!
trap 'kill "$sim" 2>/dev/null || true; wait "$sim" 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
timeout 280 python -m satpoint find --url "http://127.0.0.1:$port" --model sim --repeats 3 --no-profile \
  --start-rps 100 --ramp 1 --min-hold 3 --max-hold 5 --min-requests 600 --budget-s 200 \
  --generator-cpus 1 --no-html --out "$out" | tail -4
