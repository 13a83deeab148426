"""Pipelines: the saturation point of a DAG of models, step by step.

``dag`` is the model (steps, each with the steps it reads; the output steps), ``specs`` reads it from a Seldon
Core 2 ``Pipeline``, a Triton ensemble's configuration or a plain chain, and ``predict`` turns each step's
measured capacity into the pipeline's: the bottleneck, the critical path for latency and the sizing.
"""
