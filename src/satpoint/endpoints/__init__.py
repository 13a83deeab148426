"""Endpoints satpoint attaches to: target descriptions, pre-flight checks, payload preparation, probes."""
