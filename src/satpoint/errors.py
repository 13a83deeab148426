"""Errors that reach the user as one clear line and a non-zero exit code (never a traceback)."""

from __future__ import annotations


class SatpointError(Exception):
    """Base for errors caused by input or environment, shown to the user as a message."""


class TargetUnreachable(SatpointError):
    """The target did not answer, or answered that it is not ready."""


class TargetConnectFailed(TargetUnreachable, ConnectionError):
    """None of a segment's first connections to the target could be opened (refused, reset, unreachable):
    the target is not there (any more).  A ``ConnectionError`` too, for callers that catch those."""


class ModelNotFound(SatpointError):
    """The server does not serve the model (the message names the models it has)."""


class PayloadError(SatpointError):
    """The request payload could not be read or built, or a test request with it failed."""


class ConfigError(SatpointError):
    """Settings that cannot work together."""


class RunFailed(SatpointError):
    """The measurement itself failed after it started (every generator process died...): exit code 1,
    unlike the other errors, which are about the input (exit code 2)."""
