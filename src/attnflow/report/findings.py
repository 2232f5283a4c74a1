"""Where we match the paper and where we differ: factual sentences computed from the cells.

Nothing here interprets; each sentence states a count or a comparison of numbers:

- the paper's mean inside our confidence interval of the mean (sampling error of our mean only);
- |Δ| ≤ ``CLOSE`` (the paper prints two decimals, so smaller differences are rounding-level);
- |Δ| > 2 · paper std (outside the paper's own spread over samples);
- at which layers raw attention lies below both rollout and flow, and flow ≥ rollout, in the
  paper and in ours (the paper's two qualitative claims about Tables 1-2).
"""

from __future__ import annotations

from collections.abc import Sequence

from .paper import PaperTable
from .tables import EXPLAINER_LABELS, Cell, fmt_delta

__all__ = ["CLOSE", "table_findings"]

CLOSE = 0.05  # |Δ| at or below this counts as "close"


def _layers(layers: Sequence[int]) -> str:
    return ", ".join(f"L{k}" for k in layers) if layers else "none"


def _label(c: Cell) -> str:
    return f"{EXPLAINER_LABELS.get(c.explainer, c.explainer)} L{c.layer}"


def table_findings(paper: PaperTable, cells: Sequence[Cell]) -> list[str]:
    """Sentences about one published table compared with our cells (empty when we have none)."""
    ours = [c for c in cells if c.ours]
    if not ours:
        return []
    total = len(cells)
    out = [f"{len(ours)} of {total} cells computed."] if len(ours) < total else []
    with_ci = [c for c in ours if c.paper_in_ci is not None]
    if with_ci:
        inside = [c for c in with_ci if c.paper_in_ci]
        out.append(
            f"Paper mean inside our CI of the mean: {len(inside)} of {len(with_ci)} cells"
            + (f" ({', '.join(map(_label, inside))})." if 0 < len(inside) <= 8 else ".")
        )
    close = [c for c in ours if c.delta is not None and abs(c.delta) <= CLOSE + 1e-12]
    out.append(f"|Δ| ≤ {CLOSE:.2f}: {len(close)} of {len(ours)} cells.")
    far = [c for c in ours if c.far]
    out.append(
        "|Δ| > 2 × paper std: "
        + (", ".join(f"{_label(c)} ({fmt_delta(c.delta)})" for c in far) if far else "none")
        + "."
    )
    worst = max(ours, key=lambda c: abs(c.delta or 0.0))
    out.append(
        f"Largest |Δ|: {_label(worst)}, ours {worst.mean:.2f} vs paper {worst.paper_mean:.2f} "
        f"(Δ {fmt_delta(worst.delta)})."
    )
    by = {(c.explainer, c.layer): c for c in cells}
    if {"raw", "rollout", "flow"} <= {c.explainer for c in cells}:

        def where(pred, source: str) -> list[int]:
            got = []
            for k in paper.layers:
                vals = {
                    e: (by[(e, k)].paper_mean if source == "paper" else by[(e, k)].mean)
                    for e in ("raw", "rollout", "flow")
                }
                if all(isinstance(v, float | int) for v in vals.values()) and pred(vals):
                    got.append(k)
            return got

        def raw_below(v):
            return v["raw"] < min(v["rollout"], v["flow"])

        def flow_ge(v):
            return v["flow"] >= v["rollout"]

        out.append(
            f"Raw below both rollout and flow: paper at {_layers(where(raw_below, 'paper'))}; "
            f"ours at {_layers(where(raw_below, 'ours'))}."
        )
        out.append(
            f"Flow ≥ rollout: paper at {_layers(where(flow_ge, 'paper'))}; "
            f"ours at {_layers(where(flow_ge, 'ours'))}."
        )
    undefined = sum(int(c.n_undefined or 0) for c in ours)
    if undefined:
        worst_u = max(ours, key=lambda c: c.n_undefined or 0)
        out.append(
            f"Undefined correlations (a constant vector): {undefined} over all cells; "
            f"most at {_label(worst_u)} ({worst_u.n_undefined})."
        )
    return out
