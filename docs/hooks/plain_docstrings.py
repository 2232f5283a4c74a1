"""griffe extension: render attnflow's plain-text docstrings as Markdown without surprises.

The docstrings are plain text with equations and doctests (docs house style), not Markdown. Before
mkdocstrings renders them: doctest blocks (>>> ...) become fenced `pycon` code, indented blocks stay
code, and in the prose the characters Markdown would act on ([ ] for links, * and _ for emphasis,
< for HTML) are escaped outside `code spans`, so `maps[method][l, j]` is not read as a link.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
_SPECIAL = re.compile(r"([\[\]*_])")


def _escape(text: str) -> str:
    """Escape Markdown's link, emphasis and HTML characters outside code spans."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_SPECIAL.sub(r"\\\1", text[last : match.start()]).replace("<", "&lt;"))
        out.append(match.group())
        last = match.end()
    out.append(_SPECIAL.sub(r"\\\1", text[last:]).replace("<", "&lt;"))
    return "".join(out)


def to_markdown(docstring: str) -> str:
    lines = docstring.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):  # a doctest: up to the next blank line
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            block = [x[len(line) - len(line.lstrip()) :] for x in lines[i:j]]
            out += ["", "```pycon", *block, "```", ""]
            i = j
        elif line.startswith("    ") and (not out or not out[-1].strip() or out[-1].startswith("    ")):
            out.append(line)  # an indented code block (after a blank line): verbatim
            i += 1
        else:
            out.append(_escape(line))
            i += 1
    return "\n".join(out)


class PlainDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and not getattr(obj.docstring, "_attnflow_md", False):
            obj.docstring.value = to_markdown(obj.docstring.value)
            obj.docstring._attnflow_md = True
