"""The terminal token table: one row per token, a score column and a bar per method."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence

import numpy as np

from attnflow.viz.scale import uniform_shade

# Eighths of a block, for bars with sub-character resolution.
_BLOCKS = " ▏▎▍▌▋▊▉█"


def score_bar(score: float, vmax: float, width: int) -> str:
    """A bar of █ (and one partial block) of length width * score / vmax; empty for score <= 0.

    >>> score_bar(0.5, 1.0, 4), score_bar(0.3, 1.0, 4)
    ('██', '█▎')
    """
    if not (vmax > 0) or not (score > 0) or not math.isfinite(score):
        return ""
    eighths = round(min(score / vmax, 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[part] if part else "")


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _printable(token: str, limit: int = 24) -> str:
    """A token safe for one terminal cell: control characters shown, long tokens cut."""
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in token) or "␣"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten(text: str | None, limit: int = 80) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def token_table(
    tokens: Sequence[str],
    scores: Mapping[str, Sequence[float]],
    *,
    bar_width: int | None = None,
    title: str | None = None,
    muted: Sequence[int] = (),
    reference: Mapping[str, float] | None = None,
) -> str:
    """A text table: index, token, then per method the score and a bar.

    The bar follows the colour rule of every picture (`attnflow.viz.scale`): its length is the
    token's share of the reference mass R against the uniform share 1/n, empty at or below 1/n, the
    full width when one token holds all of R (log scale), so a near-uniform method draws no bars;
    a negative score's bar is drawn with ▒. `reference[method]` is R of the whole map the row comes
    from (`attnflow.viz.scale.reference_mass` of every layer), so a layer holding almost nothing
    draws (almost) no bars, as in the PNG; a method left out uses the shown row's own mass.
    bar_width defaults to 30 for one method and 12 per method otherwise. muted rows (e.g. [CLS] / [SEP], which often take most of the mass) are left out of the
    total and of n, and drawn with ░ (their score against the largest other one, clipped at the width).
    """
    methods = list(scores)
    columns = [np.asarray(scores[m], dtype=np.float64) for m in methods]
    for m, col in zip(methods, columns, strict=True):
        if col.shape != (len(tokens),):
            raise ValueError(
                f"scores[{m!r}] has shape {col.shape}, expected ({len(tokens)},) (one per token)"
            )
    if bar_width is None:
        bar_width = 30 if len(methods) == 1 else 12
    labels = [_printable(t) for t in tokens]
    tok_w = max([_display_width(t) for t in labels] + [len("token")])
    idx_w = max(len(str(len(tokens) - 1)), 1) + 2
    cell_w = 6 + bar_width  # "0.123 " + bar
    quiet = np.zeros(len(tokens), dtype=bool)
    quiet[[i for i in muted if 0 <= i < len(tokens)]] = True
    vmax = [float(np.nanmax(col[~quiet])) if (~quiet).any() else 0.0 for col in columns]
    refs = [None if reference is None else reference.get(m) for m in methods]
    shades = [
        uniform_shade(col[None, :], np.flatnonzero(quiet), reference=ref)[0]
        for col, ref in zip(columns, refs, strict=True)
    ]
    lines = [] if title is None else [title]
    head = f"{'#':>{idx_w}}  {'token':<{tok_w}}"
    head += "".join(f"  {m:<{cell_w}}" for m in methods)
    lines.append(head.rstrip())
    for i, label in enumerate(labels):
        row = f"{i:>{idx_w}}  {label}{' ' * (tok_w - _display_width(label))}"
        for col, top, shade in zip(columns, vmax, shades, strict=True):
            if quiet[i]:
                bar = "░" * len(score_bar(col[i], top, bar_width))
            else:
                bar = score_bar(abs(shade[i]), 1.0, bar_width)
                if shade[i] < 0:
                    bar = "▒" * len(bar)
            cell = f"{col[i]:.3f} {bar}"
            row += f"  {cell:<{cell_w}}"
        lines.append(row.rstrip())
    return "\n".join(lines)
