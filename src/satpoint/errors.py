"""Errors that reach the user as one clear line and a non-zero exit code (never a traceback)."""

from __future__ import annotations


class SatpointError(Exception):
    """Base for errors caused by input or environment, shown to the user as a message."""


class TargetUnreachable(SatpointError):
    pass


class ModelNotFound(SatpointError):
    pass


class PayloadError(SatpointError):
    pass


class ConfigError(SatpointError):
    pass
