"""What is printed: live lines, summary tables, the renderer of progress events."""
