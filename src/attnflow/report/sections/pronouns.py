"""Figure 4 as an analogue on a causal LM: which antecedent of a pronoun each method points to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from attnflow.io import load_ragged, read_json, read_parquet

from ..context import Context, get
from ..document import Heading, Paragraph, Table
from ..tables import Grid

LABELS = {"raw": "Raw attention", "rollout": "Rollout", "flow": "Flow", "attnlrp": "AttnLRP",
          "integrated_gradients": "Integrated gradients"}  # fmt: skip
LAYERED = ("raw", "rollout", "flow")  # [layer x token] maps; the others give one input row
REFERENT, DISTRACTOR = "#1a7f37", "#c62828"  # tick colours of the two antecedents


def section(ctx: Context) -> None:
    folder = ctx.paths.pronouns
    if not (folder / "summary.json").is_file():
        return
    summary = read_json(folder / "summary.json")
    sentences = read_parquet(folder / "sentences.parquet")
    scores = read_parquet(folder / "scores.parquet")
    shares = read_parquet(folder / "shares.parquet")
    reduce = summary.get("reduce", "max")
    acc = summary["accuracy"]
    n_layers = int(scores["layer"].max())
    ctx.add(
        Heading("Figure 4 on a causal LM: which antecedent of a pronoun each method points to", 2),
        Paragraph(
            "**An analogue on a causal LM, not the paper's experiment.** The paper masks a pronoun in a "
            "pretrained BERT and reads the attention of the mask to two gendered antecedents; no masked LM "
            "is available offline, so the same question is asked of SmolLM2-135M-Instruct (the packaged "
            f"GGUF, {n_layers} layers, causal attention): {summary['n']} templated sentences that end right "
            "before the pronoun, each naming two antecedents of different gender (names or gendered nouns) "
            "with a known referent, fixed by binding (reflexives, object pronouns) or by what the verb does "
            "(possessives); half put the referent first, half second, half the referents are female. The "
            "position that predicts the pronoun is the last one; the model's choice compares the logits of "
            'the two pronouns there (" himself"/" herself", " him"/" her", " his"/" her"). Each '
            "sentence starts with the BOS token, so no antecedent sits at position 0 (the attention sink); it "
            "is never scored. Raw attention, rollout and flow: the last position's row (heads averaged, "
            "residual 0.5, as in the paper); AttnLRP: its input relevance, and integrated gradients: IG × input "
            "(captum, pad-token baseline), both of the logit of the right pronoun. An antecedent of several "
            f"tokens scores the **{reduce}** over its tokens (signed for AttnLRP and IG); a method points to "
            "the referent when the referent scores above the distractor (a tie counts 1/2). Intervals: "
            "95 % percentile bootstrap over sentences."
        ),
        Paragraph(
            f"**The model prefers the right pronoun in {acc['mean']:.1%} of the sentences** "
            f"[{acc['ci_low']:.1%}, {acc['ci_high']:.1%}], n = {acc['n']}."
        ),
    )
    ctx.add(Table(_family_grid(sentences, scores, reduce, n_layers)))
    ctx.add(Table(_method_grid(summary, shares, reduce, n_layers)))
    ctx.add(Paragraph(_findings(summary, sentences, get(ctx.config, "pronouns.ig_steps"))))
    ctx.add(Paragraph(_gradient_caveat(sentences, scores, reduce, n_layers)))
    picked = _figure_sentences(sentences, get(ctx.config, "pronouns.figure") or [])
    path = ctx.paths.pronoun_maps
    if picked and path.is_file():
        lists, ids = load_ragged(path, with_ids=True)
        where = {int(k): i for i, k in enumerate(ids)}
        rows = [sentences.iloc[i] for i in picked]
        maps = [{m: v[where[int(r["sentence_id"])]] for m, v in lists.items()} for r in rows]
        ctx.figure(
            plot_pronoun_maps(maps, rows),
            "pronouns_maps.png",
            "pronoun maps of two sentences",
            caption=(
                "Figure 4's layout on the causal LM: per sentence, the model's relative probability of the two "
                "pronouns (bars), then raw attention, rollout and flow of the position that predicts the pronoun "
                "at every layer (L1 on top), then AttnLRP and integrated gradients (one row each). Referent tokens "
                "in green, distractor in red; the BOS column is left out of each row's share (it holds the sink). "
                "Colour: each token's share of the panel's strongest row against the uniform share, one scale "
                "per method (white: 1/n or less; in the AttnLRP / IG panel each row is its own method)."
            ),
        )  # fmt: skip
    ctx.figure(
        plot_share_by_layer(shares, reduce, accuracy=acc["mean"]),
        "pronouns_layers.png",
        "share of sentences whose referent outranks the distractor, by layer",
        caption=(
            "Share of sentences where the referent outranks the distractor, per layer of raw attention, rollout "
            "and flow (95 % bootstrap band); AttnLRP and integrated gradients (input rows) as horizontal lines; "
            "0.5 = no preference; the model's own accuracy dotted."
        ),
    )


def _ci(cell: Mapping[str, Any]) -> str:
    return f"{cell['mean']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def _family_grid(sentences: pd.DataFrame, scores: pd.DataFrame, reduce: str, n_layers: int) -> Grid:
    """Per template family: an example, the model's accuracy, and each method's referent share (the
    last layer of the attention maps, the input row of the others)."""
    last = scores[(scores["reduce"] == reduce) & (scores["layer"].isna() | (scores["layer"] == n_layers))]
    last = last.merge(sentences[["sentence_id", "family"]], on="sentence_id")
    share = last.pivot_table(index="family", columns="method", values="referent", sort=False)
    methods = [m for m in LABELS if m in share.columns]
    rows = []
    for fam, g in sentences.groupby("family", sort=False):
        rows.append([fam, "first" if g["referent_first"].iloc[0] else "second", g["text"].iloc[0] + " …",
                     str(len(g)), f"{g['correct'].mean():.2f}",
                     *(f"{share.loc[fam, m]:.2f}" for m in methods)])  # fmt: skip
    return Grid(
        header=[
            "family",
            "referent",
            "example (the pronoun follows)",
            "n",
            "model accuracy",
            *(LABELS[m] for m in methods),
        ],
        rows=rows,
        caption=(
            "Per template family: the model's accuracy (logit of the right pronoun > the wrong one) and the share "
            "of sentences where each method's referent outranks the distractor. A method that always points to the "
            "first-mentioned antecedent scores 1 where the referent is first and 0 where it is second."
        ),
    )


REDUCE_LABELS = {"max": "max over tokens", "sum": "sum over tokens", "max_abs": "max |score| over tokens"}


def _method_grid(summary: Mapping[str, Any], shares: pd.DataFrame, reduce: str, n_layers: int) -> Grid:
    others = [r for r in REDUCE_LABELS if r != reduce and r in set(shares["reduce"])]
    ref = shares[(shares["measure"] == "referent") & (shares["layer"].isna() | (shares["layer"] == n_layers))]
    rows = []
    for method, cell in summary["referent"].items():
        alt = []
        for r in others:
            pick = ref[(ref["method"] == method) & (ref["reduce"] == r)]
            alt.append(f"{pick['mean'].iloc[0]:.2f}" if len(pick) else "n/a")
        rows.append([
            LABELS.get(method, method), f"L{n_layers}" if method in LAYERED else "input",
            _ci(cell), _ci(summary["model_choice"][method]), _ci(summary["first"][method]), *alt,
        ])  # fmt: skip
    return Grid(
        header=[
            "method",
            "row",
            "referent outranks distractor",
            "consistent with the model's choice",
            "first-mentioned outranks second",
            *(f"referent ({REDUCE_LABELS[r]})" for r in others),
        ],
        rows=rows,
        caption=(
            f"Share of the {summary['n']} sentences (95 % bootstrap interval); antecedents scored by the "
            f"{REDUCE_LABELS.get(reduce, reduce)}. 0.5 = no preference. 'Consistent with the model's choice': the "
            "antecedent of the pronoun the model prefers outranks the other (the paper's reading of Figure 4). "
            "The last columns: the referent share under the other scorings of an antecedent."
        ),
    )


def _findings(summary: Mapping[str, Any], sentences: pd.DataFrame, ig_steps: int | None = None) -> str:
    ref, first = summary["referent"], summary["first"]
    above = [LABELS[m] for m, c in ref.items() if c["ci_low"] > 0.5]
    below = [LABELS[m] for m, c in ref.items() if c["ci_high"] < 0.5]
    biased = [
        f"{LABELS[m]} ({c['mean']:.2f})" for m, c in first.items() if c["ci_low"] > 0.5 or c["ci_high"] < 0.5
    ]
    parts = [
        "Above chance (interval above 0.5) in pointing to the referent: "
        + (", ".join(above) or "no method")
        + ".",
        "Below chance: " + (", ".join(below) or "no method") + ".",
        "Position bias (first-mentioned antecedent preferred, or the second, beyond chance): "
        + (", ".join(biased) or "none")
        + ".",
    ]
    if sentences["ig_delta"].notna().any():
        ratio = (sentences["ig_delta"].abs() / sentences["ig_difference"].abs().clip(lower=1e-9)).median()
        parts.append(
            f"Integrated gradients' completeness gap |Σ attributions − (f(x) − f(x'))| is {ratio:.1f}× "
            f"|f(x) − f(x')| (median over sentences; {ig_steps or '?'} steps): the path integral is far from "
            "converged on this model, so its row is the least reliable of the five."
        )
    return " ".join(parts)


def _gradient_caveat(sentences: pd.DataFrame, scores: pd.DataFrame, reduce: str, n_layers: int) -> str:
    """How to read AttnLRP / IG, with their referent share on the sentences the model gets wrong."""
    wrong = set(sentences.loc[~sentences["correct"].astype(bool), "sentence_id"])
    last = scores[(scores["reduce"] == reduce) & scores["sentence_id"].isin(wrong)]
    last = last[last["layer"].isna() | (last["layer"] == n_layers)]
    shares = last.groupby("method", sort=False)["referent"].mean()
    said = ", ".join(f"{LABELS.get(m, m)} {v:.2f}" for m, v in shares.items() if m not in LAYERED)
    return (
        "How to read the gradient rows: AttnLRP and integrated gradients explain the logit of the *right* pronoun, "
        "and an antecedent of the same gender supports that logit whatever the syntax says, so their share is in "
        "part gender agreement, not resolution. On the "
        f"{len(wrong)} sentences where the model prefers the wrong pronoun, the referent share is "
        f"{said or 'n/a'}. The max |score| column asks instead which antecedent moves that logit more, either way. "
        "Raw attention, rollout and flow explain no output: their row is the same whichever pronoun is asked about, "
        "as in the paper."
    )


def _figure_sentences(sentences: pd.DataFrame, families: Sequence[str]) -> list[int]:
    """Row positions of the first sentence of each named family (unknown families skipped)."""
    picked = []
    for fam in families:
        hits = np.flatnonzero(sentences["family"].to_numpy() == fam)
        if hits.size:
            picked.append(int(hits[0]))
    return picked


def plot_pronoun_maps(maps: Sequence[Mapping[str, np.ndarray]], rows: Sequence[Any]) -> Figure:
    """Per sentence (a row of panels; `maps` {method: [layer, token]} and its sentences-table row):
    pronoun bars, raw / rollout / flow [layer x token], and the input rows of the model-level
    methods; column 0 (the BOS prefix) muted in every row's share."""
    from attnflow.viz import uniform_rgba

    layered = [m for m in LAYERED if m in maps[0]]
    single = [m for m in maps[0] if m not in LAYERED]
    n_tok = max(len(s["tokens"]) for s in rows)
    fig = Figure(figsize=(1.2 + 0.32 * n_tok * (len(layered) + (1 if single else 0)) + 1.5, 5.4 * len(rows)),
                 layout="constrained")  # fmt: skip
    widths = [0.5] + [1.0] * len(layered) + ([1.0] if single else [])
    subfigs = fig.subfigures(len(rows), 1, squeeze=False)[:, 0]
    for r, (e, s) in enumerate(zip(maps, rows, strict=True)):
        tokens = [t.replace("Ġ", " ").strip() or t for t in s["tokens"]]
        sub = subfigs[r]
        sub.suptitle(
            f"({'abcdefgh'[r]}) {s['text']} …   [{s['family']}; referent: {s['referent']}]", fontsize=9
        )
        axes = sub.subplots(1, len(widths), gridspec_kw={"width_ratios": widths})
        right, wrong = set(s["referent_tokens"]), set(s["distractor_tokens"])
        ax = axes[0]
        p = float(s["p_right"])
        ax.bar([0, 1], [p, 1 - p], color=[REFERENT, DISTRACTOR])
        ax.set_xticks([0, 1], [s["right"].strip(), s["wrong"].strip()], fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title("p (of the two)", fontsize=8)
        for c, m in enumerate([*layered, *(["model"] if single else [])], start=1):
            ax = axes[c]
            if m == "model":
                matrix, labels = np.stack([e[k][-1] for k in single]), [LABELS.get(k, k) for k in single]
            else:
                matrix = e[m]
                labels = [
                    f"L{i + 1}" if i % 5 == 0 or i == len(matrix) - 1 else "" for i in range(len(matrix))
                ]
            # one scale per method (attnflow.viz.scale): a layered map's strongest layer; in the model
            # panel each row is its own method, so each row is its own reference
            ref = np.abs(matrix[:, 1:]).sum(axis=1, keepdims=True) if m == "model" else None
            ax.imshow(
                uniform_rgba(matrix, muted_columns=[0], reference=ref), aspect="auto", interpolation="nearest"
            )
            ax.set_yticks(range(len(labels)), labels, fontsize=6)
            ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
            for j, tick in enumerate(ax.get_xticklabels()):
                if j in right or j in wrong:
                    tick.set_color(REFERENT if j in right else DISTRACTOR)
                    tick.set_fontweight("bold")
            ax.set_title("AttnLRP / IG" if m == "model" else LABELS[m], fontsize=8)
    return fig


def plot_share_by_layer(shares: pd.DataFrame, reduce: str, *, accuracy: float | None = None) -> Figure:
    """Share (referent outranks distractor) by layer for the layered methods, with its CI band;
    the model-level methods as horizontal lines, the model's accuracy dotted."""
    from attnflow.report.figures import COLORS

    d = shares[(shares["measure"] == "referent") & (shares["reduce"] == reduce)]
    fig = Figure(figsize=(6.5, 3.6), layout="constrained")
    ax = fig.subplots()
    for m in LAYERED:
        g = d[d["method"] == m].sort_values("layer")
        if g.empty:
            continue
        x = g["layer"].astype(int).to_numpy()
        ax.plot(x, g["mean"], label=LABELS[m], color=COLORS.get(m))
        ax.fill_between(x, g["ci_low"], g["ci_high"], alpha=0.15, color=COLORS.get(m))
    for m, style in (("attnlrp", "--"), ("integrated_gradients", "-.")):
        g = d[(d["method"] == m) & d["layer"].isna()]
        if len(g):
            ax.axhline(float(g["mean"].iloc[0]), linestyle=style, color="0.3", label=f"{LABELS[m]} (input)")
    if accuracy is not None:
        ax.axhline(accuracy, linestyle=":", color="k", label="model accuracy")
    ax.axhline(0.5, color="0.7", linewidth=0.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("share: referent outranks distractor")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="lower right")
    return fig
