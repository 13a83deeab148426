"""One plot's ``<div>`` in a report page (plotly.js is inlined once, by the page's head)."""

from __future__ import annotations

import plotly.graph_objects as go

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": False}


def figure_html(fig: go.Figure, div_id: str) -> str:
    """One plot's ``<div>`` (plotly.js is inlined once by ``page_head``)."""
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG))
