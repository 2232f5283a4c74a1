"""Figures 2/3 style maps: the paper's example prefixes when captured, then fixed samples."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Context
from ..document import Heading, Paragraph
from ..figures import plot_maps
from ..inputs import MAP_METHODS, TaskInputs, find_examples, locate_examples, pick_samples


def section(ctx: Context) -> None:
    ctx.add(
        Heading("Attention maps (Figures 2/3 style)", 2),
        Paragraph(
            "Each panel: the explanation row (`task.<name>.rows`: CLS for agreement) at every "
            "layer (y, layer 1 at the bottom) over the input tokens (x)."
        ),
    )
    drawable = {t: g for t, g in ctx.inputs.items() if g.samples is not None and g.maps is not None}
    examples = list(ctx.config.get("report", {}).get("examples", []))
    if examples:
        ctx.add(Heading("The paper's examples", 3))
    for text in examples:
        rows = {t: find_examples(g.samples, [text])[text] for t, g in drawable.items()}
        for task, row in rows.items():
            if row is not None:
                _draw(ctx, task, drawable[task], row, prefix="example")
        if not any(r is not None for r in rows.values()):
            ctx.add(
                Paragraph(
                    f"`{text}`: not found in the captured samples (searched: {', '.join(drawable) or 'none (no samples with maps)'}).{_elsewhere(ctx, text)}"
                )
            )
    ctx.add(Heading("Fixed samples", 3))
    n = int(ctx.config.get("report", {}).get("n_examples", 0))
    picks = [(task, row) for task, got in drawable.items() for row in pick_samples(got.samples, n)]
    for task, row in picks:
        _draw(ctx, task, drawable[task], row, prefix="sample")
    if not picks:
        ctx.add(Paragraph("No captured samples with maps were found."))


def _elsewhere(ctx: Context, text: str) -> str:
    """Which prepared splits hold an example that was not captured."""
    located = {
        t: locate_examples(ctx.paths.prepared_data(t), [text])[text]
        for t in ctx.inputs
        if ctx.paths.prepared_data(t).is_dir()
    }
    splits = [f"{t} `{s}`" for t, found in located.items() for s in found]
    if splits:
        return f" It is in the prepared split(s) {', '.join(splits)}; only captured samples have maps."
    return f" Nor is it in the prepared data of {', '.join(located)}." if located else ""


def _draw(ctx: Context, task: str, got: TaskInputs, row: int, *, prefix: str) -> None:
    s = got.samples.iloc[row]  # type: ignore[union-attr]
    tokens = [str(t) for t in s["tokens"]]
    names = [m for m in MAP_METHODS if m in got.maps] + [
        m for m in got.maps if m not in MAP_METHODS and not m.endswith("_heads")
    ]  # type: ignore[union-attr]
    maps = {m: got.maps[m][row] for m in names}  # type: ignore[index]
    sid, desc = int(s["sample_id"]), describe(ctx.labels(task), s)
    try:
        fig = plot_maps(maps, tokens, title=f"{task} #{sid}: {desc}")
    except ValueError as exc:
        ctx.add(Paragraph(f"{task} sample {sid}: not drawn ({exc})."))
        return
    text = str(s.get("text", "")).replace("`", "'")
    text = text if len(text) <= 120 else text[:119] + "…"
    ctx.figure(
        fig,
        f"maps_{task}_{prefix}_{sid}.png",
        f"{task} sample {sid}",
        caption=f"{task} sample {sid}: `{text}`, {desc}",
    )


def describe(names: tuple[str, ...], s: Any) -> str:
    """``gold plural, predicted singular (p=0.80), wrong, 1 attractor(s)`` for one sample row."""

    def name(v: Any) -> str:
        return names[int(v)] if 0 <= int(v) < len(names) else str(v)

    parts = []
    labelled = "label" in s and int(s["label"]) >= 0
    if labelled:
        parts.append(f"gold {name(s['label'])}")
    if "pred" in s:
        probs = np.asarray(s["probs"], dtype=float) if s.get("probs") is not None else np.zeros(0)
        p = f" (p={probs[int(s['pred'])]:.2f})" if len(probs) > int(s["pred"]) else ""
        parts.append(f"predicted {name(s['pred'])}{p}")
        if labelled:
            parts.append("correct" if int(s["pred"]) == int(s["label"]) else "wrong")
    if "n_attractors" in s and int(s["n_attractors"]) >= 0:
        parts.append(f"{int(s['n_attractors'])} attractor(s)")
    return ", ".join(parts) or "no label"
