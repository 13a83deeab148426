"""The package's version and the results-folder schema version (imported by every layer that records them)."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1
