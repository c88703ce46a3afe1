"""The one HTML file: the page's script and style inlined, the data embedded as JSON."""

from __future__ import annotations

import html
import json
from importlib import resources

__all__ = ["render"]

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<style>{style}</style>
</head><body>
<header><h1>{title}</h1><nav id="nav"></nav></header>
<main id="app"></main>
<div id="tooltip" role="tooltip"></div>
<script id="bindscope-data" type="application/json">{data}</script>
<script>{script}</script>
</body></html>
"""


def _static(name: str) -> str:
    return resources.files("bindscope.viewer").joinpath("static").joinpath(name).read_text("utf-8")


def render(data: dict, title: str) -> str:
    """The page of ``data`` (see ``bindscope.viewer.view``)."""
    # "</" inside the JSON would end the script element early
    embedded = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    return TEMPLATE.format(
        title=html.escape(title),
        style=_static("viewer.css"),
        data=embedded,
        script=_static("viewer.js"),
    )
