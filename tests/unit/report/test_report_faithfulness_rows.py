"""The faithfulness section names the row rule of every method, shows both readings of a task-row
method, and reads "random" only through an interval: over a sweep's seeds, else this run's samples."""

from __future__ import annotations

import pandas as pd
import pytest

from attnflow.metrics.versus_random import ABOVE, BELOW, INDISTINGUISHABLE
from attnflow.report.context import Context
from attnflow.report.document import Paragraph, Table
from attnflow.report.inputs import TaskInputs
from attnflow.report.sections import faithfulness
from tests.unit.report.conftest import study_paths

METRICS = ("comprehensiveness", "sufficiency", "auc_positive", "auc_negative")
# (method, layer, rows): the task reads "max"; flow_at_cls is flow read at the CLS row.
RANKINGS = [("raw", 2, "max"), ("flow", 2, "max"), ("flow_at_cls", 2, "cls"), ("chefer", 2, "cls"),
            ("blank_out", None, "output"), ("random", None, "none")]  # fmt: skip
# this run's comprehensiveness (mean, ci_low, ci_high): flow's interval holds random's .20, chefer's
# lies over it, raw's under it.
RUN = {"raw": (0.10, 0.05, 0.15), "flow": (0.19, 0.13, 0.26), "flow_at_cls": (0.30, 0.25, 0.35),
       "chefer": (0.50, 0.41, 0.59), "blank_out": (0.33, 0.24, 0.42), "random": (0.20, 0.15, 0.28)}  # fmt: skip
# per-seed means of a 3-seed sweep (seed 0 = this run): the 95% interval over 3 seeds is [min, max].
# flow [.19, .28] holds random's mean (.2 + .24 + .16) / 3 = .20: indistinguishable, though flow's seed
# 0 mean (.19) is below random's seed 0 (.20); raw [.05, .12] is below it; chefer [.5, .56] above.
SEEDS = {"raw": (0.10, 0.05, 0.12), "flow": (0.19, 0.28, 0.22), "chefer": (0.50, 0.56, 0.53),
         "blank_out": (0.33, 0.37, 0.34), "random": (0.20, 0.24, 0.16)}  # fmt: skip


def _scores(with_rows: bool = True) -> pd.DataFrame:
    rows = []
    for method, layer, rule in RANKINGS:
        for metric in METRICS:
            mean, low, high = RUN[method] if metric == "comprehensiveness" else (0.5, 0.4, 0.6)
            rows.append(dict(method=method, layer=layer, metric=metric, mean=mean, std=0.2, ci_low=low,
                             ci_high=high, n=40, rows=rule))  # fmt: skip
    frame = pd.DataFrame(rows).astype({"layer": "Int64"})
    return frame if with_rows else frame[~frame["method"].str.endswith("_at_cls")].drop(columns="rows")


def _sweep() -> pd.DataFrame:
    """Every method but flow_at_cls (the sweep's jobs ran before the CLS-row readings) at 3 seeds."""
    rows = [dict(method=m, layer=2 if m in ("raw", "flow", "chefer") else None, metric="comprehensiveness",
                 mean=v, task="sst2", seed=s, job=str(s)) for m, vs in SEEDS.items() for s, v in enumerate(vs)]  # fmt: skip
    return pd.DataFrame(rows).astype({"layer": "Int64"})


def _section(tmp_path, scores, sweep=None) -> tuple[list[str], list[list[str]]]:
    ctx = Context(paths=study_paths(tmp_path), inputs={"sst2": TaskInputs("sst2", faithfulness=scores)},
                  config={"task": {"sst2": {"rows": "max"}}, "seed": 0, "faithfulness": {"n_boot": 4000}},
                  comparison=pd.DataFrame(), sweep_faithfulness=sweep, staging=tmp_path / "staging")  # fmt: skip
    faithfulness.section(ctx)
    texts = [b.text for b in ctx.blocks if isinstance(b, Paragraph)]
    (table,) = [b.grid for b in ctx.blocks if isinstance(b, Table)]
    return texts, [table.header, *table.rows]


def _cells(rows: list[list[str]], column: str) -> dict[str, str]:
    at = rows[0].index(column)
    return {r[0]: r[at] for r in rows[1:]}


def test_every_method_shows_its_row_rule_and_flow_is_shown_at_both_rows(tmp_path):
    texts, rows = _section(tmp_path, _scores())
    rules = _cells(rows, "rows")
    assert rules == {"Raw": "max over rows", "Flow": "max over rows", "Flow @ CLS row": "CLS row",
                     "Chefer (generic)": "CLS row", "blank-out (reference)": "prediction", "random (floor)": "—"}  # fmt: skip
    (said,) = [t for t in texts if t.startswith("Rows (sst2)")]
    assert "Raw, Flow read the max over rows (`task.sst2.rows: max`)" in said
    assert "Flow @ CLS row, Chefer (generic) read the CLS row" in said and "mixes the rule" not in said


def test_a_table_without_cls_row_readings_gets_its_rules_from_the_config_and_a_warning(tmp_path):
    texts, rows = _section(tmp_path, _scores(with_rows=False))
    assert (
        _cells(rows, "rows")["Flow"] == "max over rows"
        and _cells(rows, "rows")["Chefer (generic)"] == "CLS row"
    )
    (said,) = [t for t in texts if t.startswith("Rows (sst2)")]
    assert "mixes the rule with the method" in said


def test_without_a_sweep_random_is_read_through_this_runs_interval(tmp_path):
    texts, rows = _section(tmp_path, _scores())
    verdict = _cells(rows, "vs random")
    assert verdict["Flow"] == INDISTINGUISHABLE  # [.13, .26] holds .20
    assert verdict["Raw"] == BELOW and verdict["Chefer (generic)"] == ABOVE  # [.05, .15]; [.41, .59]
    assert verdict["Flow @ CLS row"] == ABOVE and verdict["random (floor)"] == "(the floor)"
    (said,) = [t for t in texts if t.startswith("Against the random floor")]
    assert "This run only (random 0.20; interval over its samples)" in said
    assert f"{INDISTINGUISHABLE}: Flow (0.19 [0.13, 0.26])" in said


def test_with_a_sweep_random_is_read_through_the_interval_over_seeds(tmp_path):
    texts, rows = _section(tmp_path, _scores(), _sweep())
    verdict, interval = _cells(rows, "vs random"), _cells(rows, "comprehensiveness [95% CI] (seeds)")
    assert interval["Flow"] == "0.23 [0.19, 0.28] (3 seeds)"  # (.19 + .28 + .22) / 3
    assert verdict["Flow"] == INDISTINGUISHABLE  # not "below random", as seed 0 alone would suggest
    assert verdict["Raw"] == BELOW and verdict["Chefer (generic)"] == ABOVE
    # flow_at_cls has no sweep seeds: its own run's interval, said so
    assert interval["Flow @ CLS row"] == "0.30 [0.25, 0.35] (this run)" and verdict["Flow @ CLS row"] == ABOVE
    (said,) = [t for t in texts if t.startswith("Against the random floor")]
    assert "Over 3 seeds (random's mean 0.20; bootstrap over the seeds)" in said
    assert f"{BELOW}: Raw (0.09 [0.05, 0.12])" in said
    assert "This run only (random 0.20; interval over its samples): above random: Flow @ CLS row" in said


@pytest.mark.parametrize(
    ("low", "high", "verdict"), [(0.05, 0.15, BELOW), (0.25, 0.35, ABOVE), (0.15, 0.25, INDISTINGUISHABLE)]
)
def test_the_verdict_follows_the_interval_not_the_mean(tmp_path, low, high, verdict):
    scores = _scores()
    at = (scores["method"] == "flow") & (scores["metric"] == "comprehensiveness")
    scores.loc[at, ["mean", "ci_low", "ci_high"]] = [0.2, low, high]  # the mean equals random's every time
    _, rows = _section(tmp_path, scores)
    assert _cells(rows, "vs random")["Flow"] == verdict
