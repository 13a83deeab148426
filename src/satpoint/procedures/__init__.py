"""The procedures run against a target: the saturation search, its hysteresis segment, the target hold, the trace
replay and the trace's headroom, on one results folder being measured (``session``), with the progress events they
emit."""
