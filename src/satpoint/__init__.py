"""satpoint: open-loop load testing and saturation search for Open Inference Protocol servers."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "__version__"]
