"""A long prompt as text: its tokens in reading order, wrapped into lines, each shaded by its score.

A [layer x token] grid stops being readable past ~100 tokens (the PNG of a 1,000-token prompt is a
strip of hair-thin columns). Here, as lxt and inseq draw long inputs, the text itself is the
picture: one panel per method, the tokens laid out as they read (spaces and line breaks of the
original text kept, a line wrapped at `chars_per_line`), each token's background shaded by the
rule of every attnflow picture (`attnflow.viz.scale.uniform_shade`: white at or below the uniform
share 1/n of the row, red above it, blue when negative). Muted tokens (special tokens) are grey;
removed tokens (an attention sink whose attention was moved away) are grey and hatched, so a
removed sink never reads as a low score.

`surface_tokens` turns model tokens back into the text they cover: byte-level BPE ("Ġ" = space,
"Ċ" = newline, any byte), SentencePiece ("▁" = space) and WordPiece ("##" = no space).

>>> surface_tokens(["Hello", "Ġworld", ".", "Ċ", "New"])
['Hello', ' world', '.', '\\n', 'New']
>>> surface_tokens(["[CLS]", "un", "##believ", "##able"])
['[CLS]', ' un', 'believ', 'able']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.viz.scale import SCALE_LEGEND, uniform_shade

__all__ = ["CHARS_PER_LINE", "LONG_TEXT_TOKENS", "surface_tokens", "text_heatmap_figure"]

# Above this many tokens a text explanation's PNG is drawn as wrapped text, not as a grid.
LONG_TEXT_TOKENS = 80
# Characters per wrapped line (monospace): ~8.3 in at 9 pt.
CHARS_PER_LINE = 110
_CHAR_IN = 0.075  # inches per character of DejaVu Sans Mono at 9 pt: 0.6 em = 5.4 pt
_LINE_IN = 0.24  # inches per line
_REMOVED_RGBA = (0.80, 0.80, 0.80, 1.0)
_MUTED_RGBA = (0.90, 0.90, 0.90, 1.0)
_PLAIN_TEXT = {"parse_math": False, "usetex": False}


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character standing for each byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def _byte_level(token: str) -> str | None:
    """A byte-level BPE token's text, or None when it is not one (a character outside the alphabet)."""
    table = _byte_decoder()
    if not all(ch in table for ch in token):
        return None
    return bytes(table[ch] for ch in token).decode("utf-8", errors="replace")


def surface_tokens(tokens: Sequence[str]) -> list[str]:
    """The text each model token covers, so that "".join(...) reads as the input (module docstring)."""
    tokens = list(tokens)
    if any(t.startswith("▁") for t in tokens):  # SentencePiece
        return [t.replace("▁", " ") for t in tokens]
    if any(("Ġ" in t or "Ċ" in t) for t in tokens):  # byte-level BPE
        return [_byte_level(t) or t for t in tokens]
    # WordPiece: a word starts with a space, a "##" piece continues it
    return [t[2:] if t.startswith("##") else (" " + t if k else t) for k, t in enumerate(tokens)]


def _lines(pieces: Sequence[str], width: int) -> list[list[tuple[int, str, int]]]:
    """Lay out `pieces` (one per column) into lines of at most `width` characters:
    [[(column, text drawn, x in characters), ...], ...]. A newline inside a piece ends the line."""
    lines: list[list[tuple[int, str, int]]] = [[]]
    x = 0
    for col, piece in enumerate(pieces):
        parts = piece.split("\n")
        for k, part in enumerate(parts):
            if k > 0:  # a newline, drawn as ⏎: the next part starts a new line
                lines[-1].append((col, "⏎", min(x, width - 1)))
                lines.append([])
                x = 0
            text = part.replace("\t", "    ") or (
                "␣" if len(parts) == 1 else ""
            )  # an empty token stays visible
            if not text:
                continue
            if x + len(text) > width and x > 0:
                lines.append([])
                x = 0
                text = text.lstrip(" ") or text
            lines[-1].append((col, text[:width], x))
            x += min(len(text), width)
    return [line for line in lines if line] or [[]]


def text_heatmap_figure(
    scores: Mapping[str, Any],
    *,
    tokens: Sequence[str],
    surface: Sequence[str] | None = None,
    title: str | None = None,
    muted_columns: Sequence[int] = (),
    removed_columns: Sequence[int] = (),
    chars_per_line: int = CHARS_PER_LINE,
    caption: str | None = None,
) -> Any:
    """A matplotlib Figure (Agg canvas): per method, the text wrapped into lines, each token shaded.

    scores: method -> (T,) one score per column of `tokens`; surface: the text each column covers
    (default: the tokens joined by spaces); muted_columns: grey, left out of the shading;
    removed_columns: grey and hatched, left out of the shading (removed attention sinks).
    caption: a line under the title (the layer shown, the sinks removed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if not scores:
        raise ValueError("no scores to draw")
    n = len(tokens)
    rows = {m: np.asarray(v, dtype=np.float64).reshape(-1) for m, v in scores.items()}
    for m, v in rows.items():
        if v.shape != (n,):
            raise ValueError(f"scores {m!r} have shape {v.shape}, expected ({n},)")
    if chars_per_line < 10:
        raise ValueError(f"chars_per_line must be >= 10, got {chars_per_line}")
    pieces = list(surface) if surface is not None else [(" " if k else "") + t for k, t in enumerate(tokens)]
    if len(pieces) != n:
        raise ValueError(f"surface has {len(pieces)} pieces, expected one per token ({n})")
    lines = _lines(pieces, chars_per_line)
    removed = {c for c in removed_columns if 0 <= c < n}
    muted = ({c for c in muted_columns if 0 <= c < n}) | removed
    off = sorted(muted)
    head_in = 0.35 + (0.22 * (title.count("\n") + 1) if title else 0.0) + (0.2 if caption else 0.0)
    panel_in = 0.35 + _LINE_IN * len(lines)
    width = 0.5 + _CHAR_IN * chars_per_line
    height = head_in + len(rows) * panel_in + 0.45
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    from attnflow.viz.png import uniform_rgba

    top = 1.0 - head_in / height
    for k, (method, v) in enumerate(rows.items()):
        y0 = top - (k + 1) * panel_in / height
        ax = fig.add_axes((0.25 / width, y0, (width - 0.5) / width, (panel_in - 0.1) / height))
        ax.set_xlim(0, chars_per_line)
        ax.set_ylim(len(lines) + 0.4, -0.6)
        ax.axis("off")
        ax.set_title(method, fontsize=10, loc="left", fontweight="bold", pad=2, **_PLAIN_TEXT)
        rgba = uniform_rgba(v[None, :], off)[0]  # (T, 4), the rule of every picture
        shade = np.abs(uniform_shade(v[None, :], off)[0])
        for i, line in enumerate(lines):
            for col, text, x in line:
                if col in removed:
                    face, hatch = _REMOVED_RGBA, "////"
                elif col in muted:
                    face, hatch = _MUTED_RGBA, None
                else:
                    face, hatch = tuple(rgba[col]), None
                ax.add_patch(Rectangle((x, i - 0.45), len(text), 0.9, facecolor=face, edgecolor="none",
                                       hatch=hatch, linewidth=0))  # fmt: skip
                dark = col not in muted and shade[col] > 0.6
                ax.text(x, i, text, fontsize=9, family="monospace", va="center", ha="left",
                        color="white" if dark else "#222", **_PLAIN_TEXT)  # fmt: skip
    notes = [SCALE_LEGEND]
    if muted - removed:
        notes.append("grey: special token, left out of the shading")
    if removed:
        notes.append("hatched: attention sink removed (its attention moved away), left out of the shading")
    import textwrap

    fig.text(0.25 / width, 0.08 / height, textwrap.fill("; ".join(notes), width=int(chars_per_line * 1.3)),
             fontsize=7, va="bottom", color="#444", **_PLAIN_TEXT)  # fmt: skip
    if title:
        fig.suptitle(title, fontsize=11, y=1 - 0.12 / height, va="top", **_PLAIN_TEXT)
    if caption:
        fig.text(
            0.5, 1 - (head_in - 0.18) / height, caption, fontsize=8, ha="center", color="#444", **_PLAIN_TEXT
        )
    return fig
