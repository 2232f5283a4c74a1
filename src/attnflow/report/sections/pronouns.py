"""Figure 4 on a causal LM: which antecedent of a pronoun each method points to, plain and with the
decoder corrections, against the model's choice and a causal reference."""

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
VARIANTS = ("plain", "corrected")  # attnflow.pronouns.VARIANTS
MEASURES = {  # attnflow.pronouns.MEASURES: the antecedent a map should favour, in words
    "referent": "referent outranks distractor",
    "model_choice": "consistent with the model's choice",
    "causal": "consistent with the causal reference",
    "first": "first-mentioned outranks second",
}
CAUSAL_VALUE = {"referent": 1.0, "tie": 0.5, "distractor": 0.0}  # attnflow.pronouns.CAUSAL_VALUE
CHANCE = 0.5  # every measure's chance by design (attnflow.pronouns.CHANCE); the stage writes it to its files
REFERENT, DISTRACTOR = "#1a7f37", "#c62828"  # tick colours of the two antecedents


def _with_variant(frame: pd.DataFrame) -> pd.DataFrame:
    """A table from before the corrections has no variant: all its rows are "plain"."""
    return frame if "variant" in frame else frame.assign(variant="plain")


def section(ctx: Context) -> None:
    folder = ctx.paths.pronouns
    if not (folder / "summary.json").is_file():
        return
    summary = read_json(folder / "summary.json")
    sentences = read_parquet(folder / "sentences.parquet")
    scores = _with_variant(read_parquet(folder / "scores.parquet"))
    shares = _with_variant(read_parquet(folder / "shares.parquet"))
    reduce = summary.get("reduce", "max")
    chance = float(summary.get("chance", CHANCE))
    acc = summary["accuracy"]
    n_layers = int(scores["layer"].max())
    last = _last_cells(shares, reduce, n_layers)
    ctx.add(
        Heading("Figure 4 on a causal LM: which antecedent of a pronoun each method points to", 2),
        Paragraph(
            "**An analogue on a causal LM, not the paper's experiment.** The paper masks a pronoun in a "
            "pretrained BERT and reads the attention of the mask to two gendered antecedents. **That setting "
            "(a masked LM on the masked pronoun) was not run: no masked LM is available offline.** The same "
            "question is asked of SmolLM2-135M-Instruct (the packaged "
            f"GGUF, {n_layers} layers, causal attention): {summary['n']} templated sentences that end right "
            "before the pronoun, each naming two antecedents of different gender (names or gendered nouns) "
            "with a known referent, fixed by binding (reflexives, object pronouns) or by what the verb does "
            "(possessives). The sentences come in minimal pairs: the same template and the same two antecedents, "
            "swapped, each a single token, so the twins' tokens sit at the same positions and the referent is "
            "male in one and female in the other; half the pairs put the referent first. The "
            "position that predicts the pronoun is the last one; the model's choice compares the logits of "
            'the two pronouns there (" himself"/" herself", " him"/" her", " his"/" her"). Each '
            "sentence starts with the BOS token, so no antecedent sits at position 0; it "
            "is never scored. Raw attention, rollout and flow: the last position's row (heads averaged, "
            "residual 0.5, as in the paper), **plain** (as the paper computes them) and **corrected** (the "
            "attention sinks handled and the receptive-field correction the paper's conclusion recommends for "
            "decoders, receptive_field = uniform, as attnflow's generation path offers; for raw attention the "
            "receptive-field correction is a no-op and the sink's share moves to the row's own token, so its "
            "ranking of the two antecedents changes only where an antecedent is itself detected as a sink); "
            "AttnLRP: its input "
            "relevance, and integrated gradients: IG × input (captum, pad-token baseline), both of the logit of "
            "the right pronoun, have no such correction (plain only). An antecedent of several "
            f"tokens scores the **{reduce}** over its tokens (signed for AttnLRP and IG); a method points to "
            "an antecedent when it scores above the other (a tie counts 1/2). Intervals: "
            f"95 % percentile bootstrap over sentences. Every measure is {chance:.1f} by design for a map that "
            "cannot tell the antecedents apart (chance)."
        ),
        Paragraph(
            f"**The model prefers the right pronoun in {acc['mean']:.1%} of the sentences** "
            f"[{acc['ci_low']:.1%}, {acc['ci_high']:.1%}], n = {acc['n']}. {_causal_reference(summary, sentences)}"
        ),
    )
    ctx.add(Table(_family_grid(sentences, scores, reduce, n_layers)))
    ctx.add(Table(_method_grid(summary, shares, last, reduce, n_layers, chance)))
    ctx.add(Paragraph(_findings(last, sentences, chance, get(ctx.config, "pronouns.ig_steps"))))
    ctx.add(Paragraph(_corrections(last, chance, n_layers)))
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
                "at every layer (L1 on top), then AttnLRP and integrated gradients (one row each); below, the "
                "corrected raw attention, rollout and flow, beside the causal reference (how much of the preferred "
                "pronoun's logit margin blanking each antecedent removes). Referent tokens "
                "in green, distractor in red; the BOS column is left out of each row's share (it holds the sink). "
                "Colour: each token's share of the panel's strongest row against the uniform share, one scale "
                "per method (white: 1/n or less; in the AttnLRP / IG panel each row is its own method)."
            ),
        )  # fmt: skip
    ctx.figure(
        plot_share_by_layer(shares, reduce, accuracy=acc["mean"], chance=chance),
        "pronouns_layers.png",
        "share of sentences whose map favours each antecedent, by layer, plain and corrected",
        caption=(
            "Per measure, the share of sentences where each method favours the antecedent it names, per layer of "
            "raw attention, rollout and flow, plain (solid, 95 % bootstrap band) and corrected (dashed); AttnLRP "
            f"and integrated gradients (input rows) as horizontal lines; the grey line is chance ({chance:.1f}); "
            "the model's own accuracy dotted in the referent panel."
        ),
    )


def _ci(cell: Mapping[str, Any]) -> str:
    return f"{cell['mean']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def _last_cells(shares: pd.DataFrame, reduce: str, n_layers: int) -> pd.DataFrame:
    """The shares at the last layer (attention maps) and of the input rows, under `reduce`."""
    d = shares[(shares["reduce"] == reduce) & (shares["layer"].isna() | (shares["layer"] == n_layers))]
    return d.set_index(["method", "variant", "measure"]).sort_index()


def _cell(last: pd.DataFrame, method: str, variant: str, measure: str) -> Mapping[str, Any] | None:
    key = (method, variant, measure)
    return last.loc[[key]].iloc[0] if key in last.index else None


def _causal_reference(summary: Mapping[str, Any], sentences: pd.DataFrame) -> str:
    """What the causal reference is, and which antecedent it names how often."""
    if "effect_referent" not in sentences or "causal_referent" not in summary:
        return ""
    c = summary["causal_referent"]
    blank = summary.get("blank") or "the pad token"
    ref, dis = sentences["effect_referent"].median(), sentences["effect_distractor"].median()
    return (
        "**Causal reference:** blanking an antecedent (each of its tokens replaced by "
        f"`{blank}`, the tokenizer's pad token, else its eos; positions kept) changes the model's margin m = logit(preferred "
        "pronoun) − logit(other); the antecedent whose blanking lowers m more is the causal choice. It is the "
        f"referent in {c['mean']:.1%} of the sentences [{c['ci_low']:.1%}, {c['ci_high']:.1%}] (a tie counts 1/2); "
        f"median effect of blanking the referent {ref:.2f}, the distractor {dis:.2f} (logits)."
    )


def _family_grid(sentences: pd.DataFrame, scores: pd.DataFrame, reduce: str, n_layers: int) -> Grid:
    """Per template family: an example, the model's accuracy, how often the causal reference names the
    referent, and each method's referent share (the last layer of the attention maps, plain and
    corrected, the input row of the others)."""
    last = scores[(scores["reduce"] == reduce) & (scores["layer"].isna() | (scores["layer"] == n_layers))]
    last = last.merge(sentences[["sentence_id", "family"]], on="sentence_id")
    share = last.pivot_table(index="family", columns=["method", "variant"], values="referent", sort=False)
    cols = [(m, v) for v in VARIANTS for m in LABELS if (m, v) in share.columns]
    causal = "causal_choice" in sentences
    rows = []
    for fam, g in sentences.groupby("family", sort=False):
        rows.append([fam, "first" if g["referent_first"].iloc[0] else "second", g["text"].iloc[0] + " …",
                     str(len(g)), f"{g['correct'].mean():.2f}",
                     *([f"{g['causal_choice'].map(CAUSAL_VALUE).mean():.2f}"] if causal else []),
                     *(f"{share.loc[fam, c]:.2f}" for c in cols)])  # fmt: skip
    return Grid(
        header=[
            "family",
            "referent",
            "example (the pronoun follows)",
            "n",
            "model accuracy",
            *(["causal choice = referent"] if causal else []),
            *(LABELS[m] + ("" if v == "plain" else f" ({v})") for m, v in cols),
        ],
        rows=rows,
        caption=(
            "Per template family: the model's accuracy (logit of the right pronoun > the wrong one), the share of "
            "sentences whose causal reference is the referent, and the share of sentences where each method's "
            "referent outranks the distractor (last layer; plain, then corrected). A method that always points to "
            "the first-mentioned antecedent scores 1 where the referent is first and 0 where it is second."
        ),
    )


REDUCE_LABELS = {"max": "max over tokens", "sum": "sum over tokens", "max_abs": "max |score| over tokens"}


def _method_grid(
    summary: Mapping[str, Any],
    shares: pd.DataFrame,
    last: pd.DataFrame,
    reduce: str,
    n_layers: int,
    chance: float,
) -> Grid:
    """One row per method and variant: the share of each measure with its interval (the shares
    table, `attnflow.metrics.summary_frame`), the chance level, and the referent share under the
    other antecedent reductions."""
    others = [r for r in REDUCE_LABELS if r != reduce and r in set(shares["reduce"])]
    ref = shares[(shares["measure"] == "referent") & (shares["layer"].isna() | (shares["layer"] == n_layers))]
    measures = [m for m in MEASURES if m in set(shares["measure"])]
    rows = []
    for method in LABELS:
        for variant in VARIANTS:
            cells = [_cell(last, method, variant, m) for m in measures]
            if all(c is None for c in cells):
                continue
            alt = []
            for r in others:
                pick = ref[(ref["method"] == method) & (ref["variant"] == variant) & (ref["reduce"] == r)]
                alt.append(f"{pick['mean'].iloc[0]:.2f}" if len(pick) else "n/a")
            rows.append([
                LABELS[method], variant, f"L{n_layers}" if method in LAYERED else "input",
                *(_ci(c) if c is not None else "n/a" for c in cells), f"{chance:.2f}", *alt,
            ])  # fmt: skip
    return Grid(
        header=[
            "method",
            "variant",
            "row",
            *(MEASURES[m] for m in measures),
            "chance",
            *(f"referent ({REDUCE_LABELS[r]})" for r in others),
        ],
        rows=rows,
        caption=(
            f"Share of the {summary['n']} sentences (95 % bootstrap interval); antecedents scored by the "
            f"{REDUCE_LABELS.get(reduce, reduce)}; chance = {chance:.2f} for every measure (a map blind to the "
            "antecedents). 'Consistent with the model's choice': the antecedent of the pronoun the model prefers "
            "outranks the other (the paper's reading of Figure 4); 'the causal reference': the antecedent whose "
            "blanking costs the preferred pronoun more of its margin outranks the other; 'first-mentioned': "
            "position bias (always first: 1). Corrected: sinks handled, receptive field uniform (attention maps "
            "only). The last columns: the referent share under the other scorings of an antecedent."
        ),
    )


def _findings(last: pd.DataFrame, sentences: pd.DataFrame, chance: float, ig_steps: int | None = None) -> str:
    """Which methods (plain) point to the referent above or below chance, and which have a position bias."""
    ref = {m: c for m in LABELS if (c := _cell(last, m, "plain", "referent")) is not None}
    first = {m: c for m in LABELS if (c := _cell(last, m, "plain", "first")) is not None}
    above = [LABELS[m] for m, c in ref.items() if c["ci_low"] > chance]
    below = [LABELS[m] for m, c in ref.items() if c["ci_high"] < chance]
    biased = [
        f"{LABELS[m]} ({c['mean']:.2f})"
        for m, c in first.items()
        if c["ci_low"] > chance or c["ci_high"] < chance
    ]
    parts = [
        f"Plain maps. Above chance (interval above {chance:.1f}) in pointing to the referent: "
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


def _corrections(last: pd.DataFrame, chance: float, n_layers: int) -> str:
    """What the sink and receptive-field corrections change, per attention method and measure (last
    layer), and which corrected shares have an interval clear of chance."""
    changes, clear = [], []
    for method in LAYERED:
        pairs = []
        for measure, words in MEASURES.items():
            plain, fixed = _cell(last, method, "plain", measure), _cell(last, method, "corrected", measure)
            if plain is None or fixed is None:
                continue
            pairs.append(f"{words} {plain['mean']:.2f} → {fixed['mean']:.2f}")
            side = "above" if fixed["ci_low"] > chance else "below" if fixed["ci_high"] < chance else None
            if side:
                clear.append(f"{LABELS[method]} {side} on '{words}' ({_ci(fixed)})")
        if pairs:
            changes.append(f"{LABELS[method]}: " + ", ".join(pairs))
    if not changes:
        return "The corrected variant was not computed (a table from before the corrections)."
    return (
        f"**What the corrections change** (layer {n_layers}, plain → corrected share): "
        + "; ".join(changes)
        + f". Corrected shares whose interval excludes chance ({chance:.1f}): "
        + ("; ".join(clear) or "none")
        + "."
    )


def _gradient_caveat(sentences: pd.DataFrame, scores: pd.DataFrame, reduce: str, n_layers: int) -> str:
    """How to read AttnLRP / IG, with their referent share on the sentences the model gets wrong."""
    wrong = set(sentences.loc[~sentences["correct"].astype(bool), "sentence_id"])
    last = scores[
        (scores["reduce"] == reduce) & scores["sentence_id"].isin(wrong) & (scores["variant"] == "plain")
    ]
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


def _key(method: str, variant: str) -> str:
    """A map's name in the maps file (attnflow.pronouns.map_key)."""
    return method if variant == "plain" else f"{method}/{variant}"


def _tick_antecedents(ax: Any, tokens: Sequence[str], right: set[int], wrong: set[int]) -> None:
    ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
    for j, tick in enumerate(ax.get_xticklabels()):
        if j in right or j in wrong:
            tick.set_color(REFERENT if j in right else DISTRACTOR)
            tick.set_fontweight("bold")


def _bars(ax: Any, s: Any, variant: str) -> None:
    """The plain row's pronoun probabilities (of the two), or the corrected row's causal reference."""
    if variant == "plain":
        p = float(s["p_right"])
        ax.bar([0, 1], [p, 1 - p], color=[REFERENT, DISTRACTOR])
        ax.set_xticks([0, 1], [s["right"].strip(), s["wrong"].strip()], fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title("p (of the two)", fontsize=8)
    elif "effect_referent" in s:
        ax.bar(
            [0, 1], [float(s["effect_referent"]), float(s["effect_distractor"])], color=[REFERENT, DISTRACTOR]
        )
        ax.axhline(0.0, color="0.5", linewidth=0.6)
        ax.set_xticks([0, 1], ["referent", "distractor"], fontsize=7)
        ax.set_title("margin lost\nwhen blanked", fontsize=8)
    else:
        ax.set_axis_off()


def plot_pronoun_maps(maps: Sequence[Mapping[str, np.ndarray]], rows: Sequence[Any]) -> Figure:
    """Per sentence (a block of panels; `maps` {map key: [layer, token]} and its sentences-table row):
    pronoun bars, raw / rollout / flow [layer x token], and the input rows of the model-level
    methods; below, when the maps hold them, the corrected raw / rollout / flow beside the causal
    reference's effects. Column 0 (the BOS prefix) muted in every row's share."""
    from attnflow.viz import uniform_rgba

    layered = [m for m in LAYERED if m in maps[0]]
    single = [m for m in maps[0] if m not in LAYERED and "/" not in m]
    variants = [v for v in VARIANTS if any(_key(m, v) in maps[0] for m in layered)] or ["plain"]
    n_tok = max(len(s["tokens"]) for s in rows)
    fig = Figure(figsize=(1.2 + 0.32 * n_tok * (len(layered) + (1 if single else 0)) + 1.5,
                          (5.4 if len(variants) == 1 else 8.4) * len(rows)), layout="constrained")  # fmt: skip
    widths = [0.5] + [1.0] * len(layered) + ([1.0] if single else [])
    subfigs = fig.subfigures(len(rows), 1, squeeze=False)[:, 0]
    for r, (e, s) in enumerate(zip(maps, rows, strict=True)):
        tokens = [t.replace("Ġ", " ").strip() or t for t in s["tokens"]]
        sub = subfigs[r]
        sub.suptitle(
            f"({'abcdefgh'[r]}) {s['text']} …   [{s['family']}; referent: {s['referent']}]", fontsize=9
        )
        grid = sub.subplots(len(variants), len(widths), gridspec_kw={"width_ratios": widths}, squeeze=False)
        right, wrong = set(s["referent_tokens"]), set(s["distractor_tokens"])
        for v, variant in enumerate(variants):
            axes = grid[v]
            _bars(axes[0], s, variant)
            for c, m in enumerate([*layered, *(["model"] if single else [])], start=1):
                ax = axes[c]
                if m == "model" and variant != "plain":
                    ax.set_axis_off()  # AttnLRP and IG have no correction
                    continue
                if m == "model":
                    matrix, labels = np.stack([e[k][-1] for k in single]), [LABELS.get(k, k) for k in single]
                else:
                    matrix = e[_key(m, variant)]
                    labels = [
                        f"L{i + 1}" if i % 5 == 0 or i == len(matrix) - 1 else "" for i in range(len(matrix))
                    ]
                # one scale per method (attnflow.viz.scale): a layered map's strongest layer; in the model
                # panel each row is its own method, so each row is its own reference
                ref = np.abs(matrix[:, 1:]).sum(axis=1, keepdims=True) if m == "model" else None
                ax.imshow(
                    uniform_rgba(matrix, muted_columns=[0], reference=ref),
                    aspect="auto",
                    interpolation="nearest",
                )
                ax.set_yticks(range(len(labels)), labels, fontsize=6)
                _tick_antecedents(ax, tokens, right, wrong)
                title = "AttnLRP / IG" if m == "model" else LABELS[m]
                ax.set_title(title if variant == "plain" else f"{title} ({variant})", fontsize=8)
    return fig


def plot_share_by_layer(
    shares: pd.DataFrame, reduce: str, *, accuracy: float | None = None, chance: float = CHANCE
) -> Figure:
    """One panel per measure: the share of sentences whose map favours the antecedent the measure
    names, by layer for the layered methods (plain solid with its CI band, corrected dashed), the
    model-level methods as horizontal lines, chance as a grey line, the model's accuracy dotted
    (referent panel)."""
    from attnflow.report.figures import COLORS

    shares = _with_variant(shares)
    measures = [m for m in MEASURES if m in set(shares["measure"])]
    cols = 2 if len(measures) > 1 else 1
    fig = Figure(figsize=(6.5 * cols, 3.6 * -(-len(measures) // cols)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(-(-len(measures) // cols), cols, squeeze=False)).ravel()
    for ax, measure in zip(axes, measures, strict=False):
        d = shares[(shares["measure"] == measure) & (shares["reduce"] == reduce)]
        for m in LAYERED:
            for variant, style in (("plain", "-"), ("corrected", "--")):
                g = d[(d["method"] == m) & (d["variant"] == variant)].sort_values("layer")
                if g.empty:
                    continue
                x = g["layer"].astype(int).to_numpy()
                label = LABELS[m] if variant == "plain" else f"{LABELS[m]} ({variant})"
                ax.plot(x, g["mean"], style, label=label, color=COLORS.get(m))
                if variant == "plain":
                    ax.fill_between(x, g["ci_low"], g["ci_high"], alpha=0.15, color=COLORS.get(m))
        for m, style in (("attnlrp", "--"), ("integrated_gradients", "-.")):
            g = d[(d["method"] == m) & d["layer"].isna()]
            if len(g):
                ax.axhline(
                    float(g["mean"].iloc[0]), linestyle=style, color="0.3", label=f"{LABELS[m]} (input)"
                )
        if accuracy is not None and measure == "referent":
            ax.axhline(accuracy, linestyle=":", color="k", label="model accuracy")
        ax.axhline(chance, color="0.6", linewidth=1.2, label=f"chance ({chance:.1f})")
        ax.set_title(MEASURES[measure], fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel("share of sentences")
        ax.set_ylim(0, 1)
    axes[0].legend(fontsize=6, loc="best")
    for ax in axes[len(measures) :]:
        ax.set_axis_off()
    return fig
