"""Resource limits of the servers satpoint starts: cgroups (v2) for CPU and memory."""
