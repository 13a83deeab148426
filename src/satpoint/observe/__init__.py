"""Watching the server while satpoint measures it: its process tree's CPU, memory, threads and context
switches (psutil), and its Prometheus metrics.

The watching happens in a separate process (``agent``), started by ``Observer`` for the length of a
run, so the generator's own CPU and timing are untouched: it samples the process tree a few times a
second, scrapes the metrics endpoints at each segment's start and end (on request) and a few times in
between, and appends everything to files in the results folder (``metrics.observed``).  What the
numbers mean per stage is worked out later, from those files (``analysis.server.server_side``).
"""
