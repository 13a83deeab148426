"""The option groups the commands share (typer annotations and their parsing)."""
