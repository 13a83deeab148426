"""Real traffic: recorded arrival times replayed on the open-loop engine (``satpoint run --trace``).

``trace_read`` streams a CSV or JSONL trace file in chunks of epoch seconds (the Envoy and Prometheus
importers, beside it, yield the same chunks); ``trace_plan`` scans it once (count, span, arrivals per
second, the busiest window), picks the slice to replay, and turns it into the run's due times and
stages; ``fidelity`` says, per stage, how closely the requests left at the trace's own times.
"""
