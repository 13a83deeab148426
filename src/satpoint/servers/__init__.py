"""Servers satpoint starts and stops: the embedded MLServer, the synthetic OIP server, process management."""
