"""The study's results contract: one long, tidy correlation table per task, and what derives from it.

Columns of :func:`correlation_frame` (one row per cell):

    task, importance, method, head (<NA> = all heads), layer (1-based int), variant,
    mean, std, ci_low, ci_high, n, n_undefined

``variant`` is ``"configured"`` for the study's own settings, else the name of a re-scoring under
one switch flipped alone (``"<config key>=<value>"``, :func:`switch_frame`), or
``"configured@switch_samples"``: the configured settings on the seeded subset whose importance was
recomputed under the attribution switches (the reference of those switches' Δ). DVC metrics, the per-layer curves, the
report's tables and the seed aggregate are all filters, pivots or group-bys of this table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from .correlation_table import correlation_table

__all__ = [
    "COLUMNS",
    "CONFIGURED",
    "CORRELATION_SWITCHES",
    "SWITCH_REFERENCE",
    "CorrelationSettings",
    "at_last_layer",
    "configured",
    "correlation_frame",
    "curves_frame",
    "faithfulness_tree",
    "metrics_tree",
    "sentence_frame",
    "study_frame",
    "summary_frame",
    "switch_frame",
]

COLUMNS = (
    "task", "importance", "method", "head", "layer", "variant",
    "mean", "std", "ci_low", "ci_high", "n", "n_undefined",
)  # fmt: skip
CONFIGURED = "configured"
#: The configured cells on the samples of the recomputed importance (``attribution.switch_samples``),
#: when those are a subset: what an ``attribution.*`` switch's Δ is taken against.
SWITCH_REFERENCE = "configured@switch_samples"

#: The correlation's own switches, each flipped alone from the configured settings (the report's
#: sensitivity table): config key -> {configured value: the value it is flipped to}.
CORRELATION_SWITCHES: dict[str, dict[Any, Any]] = {
    "correlate.spearman": {"average": "dense_noties", "dense_noties": "average"},
    "correlate.undefined": {"zero": "nan", "nan": "zero"},
    "correlate.include_cls.blank_out": {True: False, False: True},
    "correlate.include_cls.input_gradients": {True: False, False: True},
}


@dataclass(frozen=True)
class CorrelationSettings:
    """The correlation's configured choices: Spearman formula, undefined rule, and per importance
    score whether CLS (position 0) is ranked."""

    spearman: str
    undefined: str
    include_cls: Mapping[str, bool]

    def exclude(self, importance: Sequence[str]) -> dict[str, tuple[int, ...]]:
        return {k: () if self.include_cls.get(k, True) else (0,) for k in importance}

    def flipped(self, key: str) -> CorrelationSettings | None:
        """These settings with one switch of :data:`CORRELATION_SWITCHES` flipped."""
        name = key.removeprefix("correlate.")
        if name.startswith("include_cls."):
            kind = name.removeprefix("include_cls.")
            return replace(self, include_cls={**self.include_cls, kind: not self.include_cls.get(kind, True)})
        value = getattr(self, name)
        return replace(self, **{name: CORRELATION_SWITCHES[key][value]})


def _frame(rows: list[dict[str, Any]], *, task: str, variant: str, head: int | None = None) -> pd.DataFrame:
    df = pd.DataFrame(rows).rename(columns={"explainer": "method"})
    df = df.assign(task=task, variant=variant, head=pd.array([head] * len(df), dtype="Int64"))
    return df[list(COLUMNS)]


def correlation_frame(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    task: str,
    head_maps: Mapping[str, Sequence[np.ndarray]] | None = None,
    head_importance: Mapping[str, Sequence[np.ndarray]] | None = None,
    exclude: Mapping[str, Sequence[int]] | None = None,
    method: str = "average",
    undefined: str = "zero",
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The configured cells: every method x importance x layer with a bootstrap CI, then per head.

    ``maps[m]``: per-sample (L, T_i) rows; ``head_maps[m]``: per-sample (L, H, T_i), correlated
    head by head without bootstrap (head is 0-based) with ``head_importance`` (default
    ``importance``: the same samples). Other arguments as ``correlation_table``.

    >>> maps = {"raw": [np.array([[0.5, 0.3, 0.2]]), np.array([[0.6, 0.1, 0.3]])]}
    >>> imp = {"blank_out": [np.array([0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0])]}
    >>> correlation_frame(maps, imp, task="t", n_boot=0)[["method", "layer", "mean"]].to_dict("records")
    [{'method': 'raw', 'layer': 1, 'mean': 1.0}]
    """
    options = dict(exclude=exclude, method=method, undefined=undefined, ci=ci, seed=seed)
    parts = [
        _frame(correlation_table(maps, importance, n_boot=n_boot, **options), task=task, variant=CONFIGURED)
    ]
    for name, per_sample in (head_maps or {}).items():
        for h in range(per_sample[0].shape[1]):
            rows = correlation_table(
                {name: [a[:, h] for a in per_sample]}, head_importance or importance, n_boot=0, **options
            )
            parts.append(_frame(rows, task=task, variant=CONFIGURED, head=h))
    return pd.concat(parts, ignore_index=True)


def switch_frame(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    task: str,
    settings: CorrelationSettings,
    switched_importance: Mapping[str, tuple[str, Sequence[np.ndarray], bool]] | None = None,
    switch_samples: Sequence[int] | None = None,
    cls_blanked: bool = True,
    seed: int = 0,
) -> pd.DataFrame:
    """One variant per switch flipped alone (means without bootstrap, all heads); ``variant`` is
    ``"<config key>=<value>"``.

    Correlation switches (:data:`CORRELATION_SWITCHES`) re-score the same maps and importance;
    ranking CLS against blank-out is skipped when CLS was not blanked (``cls_blanked=False``: its
    score would be a constant 0, not what anyone computed). ``switched_importance`` maps a variant
    name to ``(importance kind, scores, cls_blanked)``: importance recomputed under a switched
    attribution setting, correlated under the configured settings (CLS left out of it if it was not
    blanked there). ``switch_samples``: the positions (in ``maps`` / ``importance``) of the samples
    that ``switched_importance`` scores, in its order (None: all, in order). When they are a subset,
    its rows are correlated on those samples, and the configured cells of those samples come as the
    variant :data:`SWITCH_REFERENCE`, so that a Δ compares the same samples.
    """
    parts = []
    for key in CORRELATION_SWITCHES:
        flipped = settings.flipped(key)
        if flipped is None:
            continue
        if not cls_blanked and flipped.include_cls.get("blank_out", False):
            continue
        value = (
            flipped.include_cls[key.rsplit(".", 1)[1]]
            if ".include_cls." in key
            else getattr(flipped, key.removeprefix("correlate."))
        )
        rows = correlation_table(
            maps, importance, exclude=flipped.exclude(list(importance)), method=flipped.spearman,
            undefined=flipped.undefined, n_boot=0, seed=seed,
        )  # fmt: skip
        parts.append(_frame(rows, task=task, variant=f"{key}={_text(value)}"))
    switched_importance = switched_importance or {}
    n_samples = len(next(iter(importance.values()), []))
    subset = switch_samples is not None and not np.array_equal(switch_samples, np.arange(n_samples))
    if subset and switched_importance:
        maps = {m: [v[i] for i in switch_samples] for m, v in maps.items()}
        importance = {k: [v[i] for i in switch_samples] for k, v in importance.items()}
        kinds = list(dict.fromkeys(kind for kind, _, _ in switched_importance.values()))
        rows = correlation_table(
            maps, {k: importance[k] for k in kinds}, exclude=settings.exclude(kinds), method=settings.spearman,
            undefined=settings.undefined, n_boot=0, seed=seed,
        )  # fmt: skip
        parts.append(_frame(rows, task=task, variant=SWITCH_REFERENCE))
    for variant, (kind, scores, blanked) in switched_importance.items():
        include = settings.include_cls.get(kind, True) and (blanked or kind != "blank_out")
        rows = correlation_table(
            maps, {kind: scores}, exclude={kind: () if include else (0,)}, method=settings.spearman,
            undefined=settings.undefined, n_boot=0, seed=seed,
        )  # fmt: skip
        parts.append(_frame(rows, task=task, variant=variant))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(COLUMNS))


def study_frame(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    methods: Sequence[str],
    task: str,
    settings: CorrelationSettings,
    switched_importance: Mapping[str, tuple[str, Sequence[np.ndarray], bool]] | None = None,
    switch_samples: Sequence[int] | None = None,
    cls_blanked: bool = True,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    heads: tuple[Mapping[str, Sequence[np.ndarray]], Mapping[str, Sequence[np.ndarray]]] | None = None,
) -> pd.DataFrame:
    """What the ``correlate`` stage writes: the configured cells of every method in ``methods``
    (per head too, :func:`correlation_frame`), then one variant per switch flipped alone
    (:func:`switch_frame`, ``switch_samples`` as there). The per-head maps: ``heads`` = (``{<method>_heads: maps}``, the
    importance of their samples), else the ``<method>_heads`` of ``maps`` (the same samples)."""
    rows = {m: maps[m] for m in methods}
    head_maps, head_importance = heads if heads is not None else (maps, None)
    configured_cells = correlation_frame(
        rows, importance, exclude=settings.exclude(list(importance)), method=settings.spearman,
        undefined=settings.undefined, n_boot=n_boot, ci=ci, seed=seed, task=task,
        head_maps={m: head_maps[f"{m}_heads"] for m in methods if f"{m}_heads" in head_maps},
        head_importance=head_importance,
    )  # fmt: skip
    switched = switch_frame(
        rows, importance, settings=settings, switched_importance=switched_importance,
        switch_samples=switch_samples, cls_blanked=cls_blanked, seed=seed, task=task,
    )  # fmt: skip
    return pd.concat([configured_cells, switched], ignore_index=True)


def sentence_frame(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    methods: Sequence[str],
    task: str,
    settings: CorrelationSettings,
    sample_ids: Sequence[int],
) -> pd.DataFrame:
    """The configured all-heads cells before averaging: one row per (sentence, importance, method,
    layer) with its Spearman ``rho`` (NaN where undefined, whatever ``settings.undefined`` says, so
    that a reader chooses), and per (sentence, method, layer) the normalised entropy of the explained
    row, ``entropy`` = H(row / sum) / log(T) (1: uniform). What the claims ledger
    (:mod:`attnflow.metrics.ledger`) resamples; ``sentence`` is the sample id.

    >>> maps = {"raw": [np.array([[0.5, 0.3, 0.2]]), np.array([[0.6, 0.1, 0.3]])]}
    >>> imp = {"blank_out": [np.array([0.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0])]}
    >>> s = CorrelationSettings("average", "zero", {"blank_out": False})
    >>> sentence_frame(maps, imp, methods=["raw"], task="t", settings=s, sample_ids=[7, 9])[["sentence", "rho"]].values.tolist()
    [[7.0, 1.0], [9.0, 1.0]]
    """
    from .correlate_samples import correlate_samples
    from .ledger import entropy_values

    exclude = settings.exclude(list(importance))
    ids = np.asarray(sample_ids, dtype=np.int64)
    parts = []
    for method in methods:
        entropy = entropy_values(maps[method])  # (N, L)
        for kind, scores in importance.items():
            corr = correlate_samples(
                maps[method], scores, exclude=exclude[kind], method=settings.spearman, undefined="nan"
            )["values"]  # (N, L)
            n, n_layers = corr.shape
            parts.append(pd.DataFrame({
                "task": task, "sentence": np.repeat(ids, n_layers), "importance": kind, "method": method,
                "layer": np.tile(np.arange(1, n_layers + 1), n), "rho": corr.ravel(),
                "entropy": entropy.ravel(),
            }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def configured(table: pd.DataFrame) -> pd.DataFrame:
    """The configured, all-heads rows."""
    return table[(table["variant"] == CONFIGURED) & table["head"].isna()]


def metrics_tree(table: pd.DataFrame) -> dict[str, Any]:
    """``{importance: {method: {"L<k>": {mean, std, ...}}}}`` of the configured all-heads cells
    (the layout ``dvc metrics show`` prints; nothing reads it back)."""
    out: dict[str, Any] = {}
    stats = ("mean", "std", "ci_low", "ci_high", "n", "n_undefined")
    for r in configured(table).itertuples(index=False):
        cell = out.setdefault(r.importance, {}).setdefault(r.method, {})
        cell[f"L{r.layer}"] = {k: _plain(getattr(r, k)) for k in stats}
    return out


def curves_frame(table: pd.DataFrame, importance: str) -> pd.DataFrame:
    """Mean correlation per layer, one column per method, for one importance score (a DVC plot)."""
    rows = configured(table)
    rows = rows[rows["importance"] == importance]
    wide = rows.pivot(index="layer", columns="method", values="mean").round(6)
    return wide[list(dict.fromkeys(rows["method"]))].reset_index()


def perturbation_curves_frame(curves: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """The predicted class's probability per perturbed fraction, one column per method (at the last
    layer; references and the random floor have no layer), for one protocol (a DVC plot).

    >>> c = pd.DataFrame({"method": ["flow", "flow", "random", "random"], "layer": [2, 2, None, None],
    ...                   "protocol": "positive", "fraction": [0.0, 1.0, 0.0, 1.0], "prob": [.9, .5, .9, .7]})
    >>> perturbation_curves_frame(c, "positive").to_dict("list")
    {'fraction': [0.0, 1.0], 'flow': [0.9, 0.5], 'random': [0.9, 0.7]}
    """
    rows = curves[curves["protocol"] == protocol]
    rows = rows[rows["layer"].isna() | (rows["layer"] == rows["layer"].max())]
    wide = rows.pivot(index="fraction", columns="method", values="prob").round(6)
    return wide[list(dict.fromkeys(rows["method"]))].reset_index().rename_axis(columns=None)


def _plain(x: Any) -> Any:
    """numpy / pandas scalars to Python numbers (nan kept; the JSON writer makes it null)."""
    if x is pd.NA or x is None:
        return None
    return int(x) if isinstance(x, np.integer | int) and not isinstance(x, bool) else float(x)


def summary_frame(
    values: pd.DataFrame, by: Sequence[str], *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """Per group of ``by``: mean, std, bootstrap CI of the mean and n of the ``value`` column
    (one value per sample, nan skipped; see :func:`attnflow.metrics.summarize`).

    >>> df = pd.DataFrame({"method": ["a", "a", "b"], "value": [0.5, 1.0, np.nan]})
    >>> summary_frame(df, ["method"], n_boot=0)[["method", "mean", "n"]].to_dict("records")
    [{'method': 'a', 'mean': 0.75, 'n': 2}, {'method': 'b', 'mean': nan, 'n': 0}]
    """
    from .summarize import summarize

    rows = []
    for key, group in values.groupby(list(by), sort=False, dropna=False):
        stats = summarize(group["value"].to_numpy(dtype=np.float64)[:, None], n_boot=n_boot, ci=ci, seed=seed)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key, strict=True)), **{k: _plain(v[0]) for k, v in stats.items()}})
    return pd.DataFrame(rows, columns=[*by, "mean", "std", "ci_low", "ci_high", "n"])


def at_last_layer(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of the last layer, and those without a layer (reference rankings)."""
    last = scores["layer"].max()
    return scores[scores["layer"].isna() | (scores["layer"] == last)]


def faithfulness_tree(scores: pd.DataFrame) -> dict[str, dict[str, float]]:
    """``{method: {metric: mean}}`` at the last layer (and the references): what ``dvc metrics
    show`` prints and MLflow logs (nothing reads it back)."""
    out: dict[str, dict[str, float]] = {}
    for r in at_last_layer(scores).itertuples():
        out.setdefault(r.method, {})[r.metric] = _plain(r.mean)
    return out
