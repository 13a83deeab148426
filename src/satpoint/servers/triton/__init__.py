"""The embedded Triton: PyTriton in a process of its own, and the repository variant."""
