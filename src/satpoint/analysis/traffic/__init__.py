"""Traffic analysis: a replay predicted from a stage's service times, and the search for a trace's headroom
(speed-up)."""
