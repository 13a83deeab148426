"""The HTML pages: ``report.html`` and its sections, the diff, sweep and cold-start pages."""
