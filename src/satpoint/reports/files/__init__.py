"""The files written from results: ``summary.json``, ``intervals.csv``, ``flamegraph.svg``, Kubernetes YAML, ``satpoint
diff``'s JSON, Markdown and JUnit."""
