"""mkdocs hook: the method table of methods/index.md, written from the method records.

The page holds the marker ``<!-- method-records -->``; this hook replaces it with one row per
record of ``attnflow.methods.METHODS`` (name, kind, needs, study / generation, label, summary and
row read), so a new method's record reaches the docs with no docs edit.
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "<!-- method-records -->"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def method_table() -> str:
    from attnflow.methods import METHODS

    # five columns, so the table fits the page's text column (the label is in "what it is")
    rows = [
        "| name | computed from | needs besides attn | runs in | what it is |",
        "|---|---|---|---|---|",
    ]
    for r in METHODS.values():
        source = "the attentions" if r.kind == "attention" else "its own model pass"
        needs = ", ".join(f"`{n}`" for n in r.needs) or "—"
        where = ", ".join(w for w, on in (("study", r.study), ("generation", r.generation)) if on) or "—"
        rows.append(
            f"| `{r.name}` | {source} | {needs} | {where} | {r.label}: {r.summary} (row read: {r.rows}) |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, method_table()) if MARKER in markdown else markdown
