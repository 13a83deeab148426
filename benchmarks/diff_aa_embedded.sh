#!/usr/bin/env bash
# A/A pairs of `find` on the embedded MLServer (iris, sklearn, 1 worker): the second of each pair with
# --baseline the first, then `satpoint diff` both ways; every regression or improvement is a false alarm.
# Usage: benchmarks/diff_aa_embedded.sh OUT_DIR [PAIRS]   (about 2.5 minutes a pair on 2 cores)
set -euo pipefail
out=${1:?OUT_DIR}
pairs=${2:-3}
mkdir -p "$out"
SHORT=(--no-profile --ramp 1 --min-hold 3 --max-hold 5 --min-requests 600 --start-rps 100 --budget-s 260 --no-html)
for ((k = 1; k <= pairs; k++)); do
  a="$out/aa$((2 * k - 1))" b="$out/aa$((2 * k))"
  timeout 400 satpoint find "${SHORT[@]}" --out "$a" > "$a.log" 2>&1 || echo "find $a: exit $?"
  set +e
  timeout 400 satpoint find "${SHORT[@]}" --out "$b" --baseline "$a" > "$b.log" 2>&1
  echo "pair $k: find --baseline exit $?"
  timeout 120 satpoint diff "$a" "$b" --json "$b/diff.json" > "$b/diff.txt" 2>&1
  echo "pair $k: diff exit $?"
  set -e
done
python - "$out" "$pairs" <<'PY'
import json, sys, collections
out, pairs = sys.argv[1], int(sys.argv[2])
for k in range(1, pairs + 1):
    d = json.load(open(f"{out}/aa{2 * k}/diff.json"))
    counts = collections.Counter(m["verdict"] for m in d["metrics"])
    sat = next((m for m in d["metrics"] if m["metric"] == "saturation_rps"), None)
    hold = d.get("target_hold") or {}
    false = [f"{m['metric']} @ {m['point']} {m['verdict']} ({m['change']:+.3f})" for m in d["metrics"]
             if m["verdict"] in ("regression", "improvement")]
    print(f"pair {k}: overall {d['verdict']}; saturation {sat and sat['verdict']} ({sat and sat['text']}); "
          f"verdicts {dict(counts)}; no_change share {counts['no_change'] / max(1, sum(counts.values())):.2f}; "
          f"false alarms {false or 'none'}; target hold {hold.get('verdict')}")
PY
