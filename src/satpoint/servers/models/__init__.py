"""The demo models (and the text generator) the embedded servers serve."""
