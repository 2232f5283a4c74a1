"""The claims ledger: each claim Abnar & Zuidema (2020) make in words, the per-sentence statistic
that tests it, a bootstrap interval over seeds and sentences, and a verdict by one rule.

A claim is tested on one tidy table of per-sentence values (``values``: columns ``seed``,
``sentence``, ``value``), where ``value`` is oriented so that a positive mean supports the claim
against its ``null`` (0 for a paired difference; 0.5 for a two-way choice whose chance is one half,
as Figure 4's "consistent with the prediction"). The interval resamples seeds with replacement and
then sentences with replacement within each drawn seed (a two-level bootstrap: the seed spread and
the sentence spread both widen it); a paired comparison of two methods takes their difference on
the same sentence first, so the pairing is kept through the resampling.

The rule, stated once (:func:`verdict`): **holds** when the whole interval lies above ``null``,
**fails** when it lies at or below it, **inconclusive** when it straddles it.

>>> rng = np.random.default_rng(0)
>>> values = pd.DataFrame({"seed": np.repeat([0, 1, 2], 50), "sentence": np.tile(np.arange(50), 3),
...                        "value": rng.normal(0.3, 0.2, 150)})
>>> est, lo, hi = two_level_bootstrap(values, n_boot=500, ci=0.95, seed=0)
>>> round(est, 2), verdict(lo, hi, null=0.0)
(0.31, 'holds')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "LEDGER_COLUMNS",
    "PAPER_CLAIMS",
    "VERDICTS",
    "PaperClaim",
    "entropy_values",
    "ledger",
    "two_level_bootstrap",
    "verdict",
]

VERDICTS = ("holds", "fails", "inconclusive")
LEDGER_COLUMNS = (
    "claim", "source", "quote", "statistic", "task", "n_seeds", "n_sentences",
    "estimate", "ci_low", "ci_high", "null", "verdict",
)  # fmt: skip

# Per-sentence frames a claim reads, by name: "correlations" (task, seed, sentence, importance,
# method, layer, rho), "entropy" (task, seed, sentence, method, layer, entropy: the map's row
# entropy over log(T)), "pronouns" (seed, sentence, method, layer, variant, model_choice, referent).
Frames = dict[str, pd.DataFrame]


@dataclass(frozen=True)
class PaperClaim:
    """One claim of the paper: its words, where they stand, the statistic in words, and the function
    that turns the per-sentence frames into the oriented per-sentence values (seed, sentence, value)."""

    key: str
    source: str  # where the paper says it
    quote: str  # the paper's words
    statistic: str  # what is averaged per sentence (> null supports the claim)
    task: str
    reads: str  # the frame of Frames it needs
    values: Callable[[pd.DataFrame], pd.DataFrame]
    null: float = 0.0


def two_level_bootstrap(
    values: pd.DataFrame, *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``value`` over every (seed, sentence) and its percentile
    interval when seeds are resampled with replacement and then sentences within each drawn seed.

        estimate = mean_{s, i} v[s, i];  replicate b: seeds s*_1..s*_S ~ seeds, and for each s*_k
        sentences i*_1..i*_{n_k} ~ sentences of s*_k; v*_b = mean of the drawn v[s*_k, i*]

    One seed: the ordinary sentence bootstrap. No rows: (nan, nan, nan).
    """
    if values.empty:
        return float("nan"), float("nan"), float("nan")
    if not 0 < ci < 1:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    groups = [g["value"].to_numpy(np.float64) for _, g in values.groupby("seed", sort=True)]
    groups = [g[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if g.size]
    if not groups:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    estimate = float(np.concatenate(groups).mean())
    reps = np.empty(n_boot)
    for b in range(n_boot):
        drawn = rng.integers(0, len(groups), len(groups))
        total = count = 0.0
        for k in drawn:
            g = groups[k]
            total += g[rng.integers(0, g.size, g.size)].sum()
            count += g.size
        reps[b] = total / count
    alpha = (1 - ci) / 2
    low, high = np.quantile(reps, [alpha, 1 - alpha])
    return estimate, float(low), float(high)


def verdict(low: float, high: float, *, null: float = 0.0) -> str:
    """The one rule: "holds" when low > null, "fails" when high <= null, else "inconclusive"
    (also for an interval that could not be computed).

    >>> verdict(0.01, 0.2), verdict(-0.2, 0.0), verdict(-0.1, 0.1), verdict(0.4, 0.45, null=0.5)
    ('holds', 'fails', 'inconclusive', 'fails')
    """
    if not (np.isfinite(low) and np.isfinite(high)):
        return "inconclusive"
    if low > null:
        return "holds"
    if high <= null:
        return "fails"
    return "inconclusive"


def entropy_values(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Per sample and layer, the normalised entropy of an explained row: H(p) / log(T), p = row / sum.

    1 is uniform, 0 is all mass on one token; (N, L). A row with no mass gives nan.

    >>> entropy_values([np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])]).round(3).tolist()
    [[1.0, 0.0]]
    """
    out = []
    for m in maps:
        m = np.clip(np.asarray(m, dtype=np.float64), 0.0, None)  # (L, T)
        total = m.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = m / total
            h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1) + 0.0  # + 0.0: no -0.0
            out.append(np.where(total[..., 0] > 0, h / np.log(max(m.shape[-1], 2)), np.nan))
    return np.stack(out) if out else np.zeros((0, 0))


# ------------------------------------------------------------------------------------------------
# The paper's claims (papers/abnar-zuidema-2020-quantifying-attention-flow.txt)
# ------------------------------------------------------------------------------------------------


def _layers(frame: pd.DataFrame, column: str, keys: dict, layers: Sequence[int]) -> pd.Series:
    """Mean of ``column`` over ``layers`` per (seed, sentence), for the rows matching ``keys``."""
    rows = frame
    for k, v in keys.items():
        rows = rows[rows[k] == v]
    rows = rows[rows["layer"].isin(list(layers))]
    return rows.groupby(["seed", "sentence"])[column].mean()


def _tidy(series: pd.Series) -> pd.DataFrame:
    return series.rename("value").dropna().reset_index()


def _paired(task: str, importance: str, a: str, b: str, layers: Sequence[int]) -> Callable:
    """Per sentence: mean over ``layers`` of rho(a) − rho(b) (the same sentence, seed and layers)."""

    def values(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[frame["task"] == task]
        one = dict(importance=importance)
        return _tidy(
            _layers(frame, "rho", {**one, "method": a}, layers)
            - _layers(frame, "rho", {**one, "method": b}, layers)
        )

    return values


def _raw_focus(importance: str) -> Callable:
    """Per sentence: rho(raw, L1) − mean rho(raw, L2..L6)."""

    def values(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[frame["task"] == "agreement"]
        keys = dict(importance=importance, method="raw")
        return _tidy(_layers(frame, "rho", keys, [1]) - _layers(frame, "rho", keys, range(2, 7)))

    return values


def _uniform_above_three(frame: pd.DataFrame) -> pd.DataFrame:
    """Per sentence: mean normalised entropy of raw attention's explained row over L4-L6 minus over L1-L3."""
    frame = frame[(frame["task"] == "agreement") & (frame["method"] == "raw")]
    return _tidy(_layers(frame, "entropy", {}, range(4, 7)) - _layers(frame, "entropy", {}, range(1, 4)))


def _low_everywhere(method: str, ceiling: float) -> Callable:
    """Per sentence: ceiling − mean rho(method) over the layers (> 0: below the ceiling)."""

    def values(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[(frame["task"] == "sst2") & (frame["importance"] == "input_gradients")]
        rows = frame[frame["method"] == method]
        return _tidy(ceiling - rows.groupby(["seed", "sentence"])["rho"].mean())

    return values


def _consistent(method: str, variant: str, measure: str = "model_choice") -> Callable:
    """Per sentence: 1 when the method's scores at the last layer favour the reference antecedent
    of ``measure`` (``model_choice``: the antecedent of the pronoun the model prefers; ``causal``: the
    one whose blanking moves the model's pronoun margin more), 0.5 on a tie, else 0; chance 0.5."""

    def values(frame: pd.DataFrame) -> pd.DataFrame:
        if measure not in frame:
            return _tidy(pd.Series(dtype=np.float64))
        rows = frame[(frame["method"] == method) & (frame["variant"] == variant)]
        rows = rows[rows["layer"] == rows["layer"].max()]
        return _tidy(rows.groupby(["seed", "sentence"])[measure].mean())

    return values


def _same_choice(variant: str) -> Callable:
    """Per sentence: 1 when rollout and flow (last layer) favour the same antecedent, else 0 (a tie
    in either counts one half); two independent coin flips agree half the time."""

    def values(frame: pd.DataFrame) -> pd.DataFrame:
        rows = frame[frame["variant"] == variant]
        rows = rows[rows["layer"] == rows["layer"].max()]
        wide = rows.pivot_table(
            index=["seed", "sentence"], columns="method", values="referent", aggfunc="mean"
        )
        if not {"rollout", "flow"} <= set(wide.columns):
            return _tidy(pd.Series(dtype=np.float64))
        a, b = wide["rollout"], wide["flow"]
        return _tidy(a * b + (1 - a) * (1 - b))

    return values


TABLE_LAYERS = range(1, 7)
UPPER = range(2, 7)  # L1 is raw attention's own layer, where the paper's raw is the highest
TABLE3_CEILING = 0.20  # "very low correlation": a mean Spearman below 0.20

_IMPORTANCE = {"blank_out": "blank-out (Table 1)", "input_gradients": "input gradients (Table 2)"}

PAPER_CLAIMS: tuple[PaperClaim, ...] = (
    *(
        PaperClaim(
            f"raw_focus_L1/{imp}",
            f"§2, {_IMPORTANCE[imp]}",
            "the correlation between raw attention weights of the CLS token and blank-out scores is rather "
            "low, except for the first layer",
            "rho(raw, L1) − mean rho(raw, L2-L6)",
            "agreement",
            "correlations",
            _raw_focus(imp),
        )
        for imp in _IMPORTANCE
    ),
    PaperClaim(
        "raw_uniform_upper",
        "§2 and §4, Figures 1-2",
        "the raw attention weights are almost uniform above layer three",
        "normalised entropy of raw attention's CLS row, mean L4-L6 − mean L1-L3",
        "agreement",
        "entropy",
        _uniform_above_three,
    ),
    *(
        PaperClaim(
            f"{method}_above_raw/{imp}",
            f"abstract, §4, {_IMPORTANCE[imp]}",
            "compared to raw attention, both [rollout and flow] yield higher correlations with importance "
            "scores of input tokens obtained using an ablation method and input gradients",
            f"mean over L2-L6 of rho({method}) − rho(raw), paired",
            "agreement",
            "correlations",
            _paired("agreement", imp, method, "raw", UPPER),
        )
        for imp in _IMPORTANCE
        for method in ("rollout", "flow")
    ),
    *(
        PaperClaim(
            f"flow_above_rollout/{imp}",
            f"§4, {_IMPORTANCE[imp]}",
            "attention flow weights are more reliable than attention rollout",
            "mean over L1-L6 of rho(flow) − rho(rollout), paired",
            "agreement",
            "correlations",
            _paired("agreement", imp, "flow", "rollout", TABLE_LAYERS),
        )
        for imp in _IMPORTANCE
    ),
    *(
        PaperClaim(
            f"table3_{method}_above_raw",
            "§4, Table 3",
            "we can still see that attention rollout and attention flow are slightly better than raw attention",
            f"mean over the layers of rho({method}) − rho(raw) vs input gradients, paired",
            "sst2",
            "correlations",
            _paired("sst2", "input_gradients", method, "raw", TABLE_LAYERS),
        )
        for method in ("rollout", "flow")
    ),
    *(
        PaperClaim(
            f"table3_{method}_low",
            "§4, Table 3",
            "for this model, all three methods have very low correlation with the input gradients",
            f"{TABLE3_CEILING} − mean rho({method}) over the layers",
            "sst2",
            "correlations",
            _low_everywhere(method, TABLE3_CEILING),
        )
        for method in ("raw", "rollout", "flow")
    ),
    *(
        PaperClaim(
            f"figure4_{method}_consistent/{variant}",
            "§4, Figure 4",
            "attention rollout and attention flow are consistent with each other and the prediction of the model",
            f"share of sentences where {method} (last layer, {variant}) favours the antecedent of the model's "
            "preferred pronoun; chance 0.5",
            "pronouns",
            "pronouns",
            _consistent(method, variant),
            null=0.5,
        )
        for variant in ("plain", "corrected")
        for method in ("rollout", "flow")
    ),
    *(
        PaperClaim(
            f"figure4_{method}_causal/{variant}",
            "§4, Figure 4 (causal reference)",
            "attention rollout and attention flow are consistent with ... the prediction of the model",
            f"share of sentences where {method} (last layer, {variant}) favours the antecedent whose blanking "
            "lowers the model's pronoun margin more; chance 0.5",
            "pronouns",
            "pronouns",
            _consistent(method, variant, "causal"),
            null=0.5,
        )
        for variant in ("plain", "corrected")
        for method in ("rollout", "flow")
    ),
    *(
        PaperClaim(
            f"figure4_rollout_flow_agree/{variant}",
            "§4, Figure 4",
            "attention rollout and attention flow are consistent with each other",
            f"share of sentences where rollout and flow (last layer, {variant}) favour the same antecedent; "
            "chance 0.5",
            "pronouns",
            "pronouns",
            _same_choice(variant),
            null=0.5,
        )
        for variant in ("plain", "corrected")
    ),
)


def ledger(
    frames: Frames,
    claims: Sequence[PaperClaim] = PAPER_CLAIMS,
    *,
    n_boot: int = 2000,
    ci: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per claim whose frame is given (columns :data:`LEDGER_COLUMNS`): the estimate, its
    two-level bootstrap interval and the verdict. A claim whose frame is absent, or has no rows for it
    (a variant the run did not compute), is left out: not measured is not a verdict."""
    rows = []
    for claim in claims:
        frame = frames.get(claim.reads)
        if frame is None:
            continue
        values = claim.values(frame)
        if values.empty:
            continue
        estimate, low, high = two_level_bootstrap(values, n_boot=n_boot, ci=ci, seed=seed)
        rows.append({
            "claim": claim.key, "source": claim.source, "quote": claim.quote, "statistic": claim.statistic,
            "task": claim.task, "n_seeds": int(values["seed"].nunique()),
            "n_sentences": len(values), "estimate": estimate, "ci_low": low, "ci_high": high,
            "null": claim.null, "verdict": verdict(low, high, null=claim.null),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(LEDGER_COLUMNS))
