"""mkdocs hook: the method table of methods/index.md, written from the method records.

The page holds the marker ``<!-- method-records -->``; this hook replaces it with one row per
record of ``attnflow.methods.METHODS`` (name, label, kind, needs, row read, study / generation,
summary), so a new method's record reaches the docs with no docs edit.
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "<!-- method-records -->"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def method_table() -> str:
    from attnflow.methods import METHODS

    rows = [
        "| name | label | computed from | needs besides attn | row read | study | generation | what it is |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in METHODS.values():
        source = "the attentions" if r.kind == "attention" else "its own pass through the model"
        needs = ", ".join(f"`{n}`" for n in r.needs) or "—"
        rows.append(
            f"| `{r.name}` | {r.label} | {source} | {needs} | {r.rows} | {'yes' if r.study else 'no'} | "
            f"{'yes' if r.generation else 'no'} | {r.summary} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, method_table()) if MARKER in markdown else markdown
