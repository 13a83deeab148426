"""``python -m satpoint``: the command line."""

from satpoint.cli.main import entrypoint

entrypoint()
