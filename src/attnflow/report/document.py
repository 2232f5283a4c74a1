"""A report as a list of blocks, rendered to markdown and to HTML from the same blocks.

Inline markup in text is limited to ```code``` and ``**bold**``; both renderers understand it.

>>> doc = [Heading("Title"), Paragraph("uses `flow`"), Bullets(["a", "b"])]
>>> print(render_markdown(doc))
# Title
<BLANKLINE>
uses `flow`
<BLANKLINE>
- a
- b
<BLANKLINE>
>>> "<code>flow</code>" in render_html(doc, title="t")
True
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .tables import Grid, to_html, to_markdown

__all__ = ["Block", "Bullets", "Heading", "Image", "Paragraph", "Table", "render_html", "render_markdown"]


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 1


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    grid: Grid


@dataclass(frozen=True)
class Image:
    path: str  # relative to the report file
    alt: str
    caption: str = ""


Block = Heading | Paragraph | Bullets | Table | Image

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
th:first-child { text-align: left; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: 0.3rem; }
td.far { background: #f8d7d3; }
td.match { background: #d9f0d9; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; }
code { background: #f3f3f3; padding: 0 0.2rem; }
"""


def _inline_html(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def render_markdown(blocks: Sequence[Block]) -> str:
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            parts.append(b.text)
        elif isinstance(b, Bullets):
            parts.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            parts.append(to_markdown(b.grid))
        elif isinstance(b, Image):
            text = f"![{b.alt}]({b.path})"
            parts.append(f"{text}\n\n*{b.caption}*" if b.caption else text)
    return "\n\n".join(parts) + "\n"


def render_html(blocks: Sequence[Block], *, title: str) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            level = min(max(b.level, 1), 6)
            body.append(f"<h{level}>{_inline_html(b.text)}</h{level}>")
        elif isinstance(b, Paragraph):
            body.append(f"<p>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            body.append(to_html(b.grid))
        elif isinstance(b, Image):
            cap = f"<figcaption>{_inline_html(b.caption)}</figcaption>" if b.caption else ""
            body.append(f'<figure><img src="{html.escape(b.path)}" alt="{html.escape(b.alt)}">{cap}</figure>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
