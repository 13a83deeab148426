"""Experiments: the same method run several ways on one server, side by side (compare, demo co)."""
