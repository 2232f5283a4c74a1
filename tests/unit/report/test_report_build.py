"""Report generation from a fixed small set of stage outputs (see conftest.py for the numbers)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from attnflow.report import build_report
from attnflow.report.paper import TABLES
from tests.unit.report.conftest import N, correlations, study_paths

EXAMPLES = ["the article on NNP large systems", "here the NNS differ in that the female"]
CONFIG = {
    "study": "s",
    "seed": 0,
    "explain": {"residual": 0.5, "heads": "mean"},
    "task": {"agreement": {"rows": "cls"}, "sst2": {"rows": "max", "capture": {"split": "dev"}}},
    "attribution": {"blank_token": "pad", "gradient_reduction": "abs_sum"},
    "correlate": {"spearman": "average", "undefined": "zero", "include_cls": {"blank_out": False}},
}


def _build(root, tasks=("agreement", "sst2"), examples=EXAMPLES, n_examples=2):
    config = {**CONFIG, "report": {"examples": examples, "n_examples": n_examples}}
    return build_report(tasks=list(tasks), paths=study_paths(root), config=config)


@pytest.fixture(scope="module")
def built(tmp_path_factory, make_stage_outputs):
    """One report over both tasks, shared by the read-only tests (figures are the slow part)."""
    root = tmp_path_factory.mktemp("built")
    make_stage_outputs(root)
    prepared = root / "data" / "prepared" / "agreement"
    prepared.mkdir(parents=True)
    pd.DataFrame({"text": ["a b", "here the NNS differ in that the female"]}).to_parquet(
        prepared / "train.parquet"
    )
    pd.DataFrame({"text": ["c d"]}).to_parquet(prepared / "test.parquet")
    return root, _build(root)


def _table(md: str, number: int) -> list[str]:
    """The markdown rows of Table ``number`` (its grid, after the ``### Table k`` heading)."""
    section = md.split(f"### Table {number}\n", 1)[1].split("\n### ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ")]


def _row(rows: list[str], name: str) -> list[str]:
    return next([c.strip() for c in r.strip("|").split("|")] for r in rows if r.startswith(f"| {name} |"))[1:]


def test_table1_shows_ours_paper_and_delta_by_hand(built):
    report = built[1]
    rows = _table(report.markdown, 1)
    assert rows[0] == "| vs blank-out | L1 | L2 | L3 | L4 | L5 | L6 |"
    # Raw L1: ours 0.59 ± 0.30, paper 0.69 ± 0.27, Δ = 0.59 - 0.69 = -0.10.
    # Raw L2: ours = paper + 0.03 = 0.13 (std 0.20), paper 0.10 ± 0.43, Δ = +0.03.
    # Raw L3: ours 0.95, paper -0.11 ± 0.49, Δ = +1.06 > 2 * 0.49 -> marked ‼.
    assert _row(rows, "Raw (ours)")[:3] == ["0.59 ± 0.30", "0.13 ± 0.20", "0.95 ± 0.05"]
    assert _row(rows, "Raw (paper)")[:3] == ["0.69 ± 0.27", "0.10 ± 0.43", "-0.11 ± 0.49"]
    assert _row(rows, "Raw Δ")[:3] == ["-0.10", "+0.03", "+1.06 ‼"]
    # Flow L3: ours 0.70 with CI [0.68, 0.72] holding the paper's 0.70 -> Δ +0.00, marked ✓.
    assert _row(rows, "Flow Δ")[2] == "+0.00 ✓"
    # Table 2, Rollout L6: ours 0.40, paper 0.54 -> Δ -0.14.
    assert _row(_table(report.markdown, 2), "Rollout Δ")[5] == "-0.14"
    # Table 3 keeps the paper's four layers.
    assert _table(report.markdown, 3)[0] == "| vs input gradients | L1 | L3 | L5 | L6 |"


def test_headline_json_is_a_handful_of_short_named_numbers(built):
    # `dvc exp show` of metrics.json is 146 columns; the headline is 3 per task, short names
    stage_outputs, report = built
    headline = json.loads((stage_outputs / "reports" / "headline.json").read_text())
    assert set(headline) == {"agr", "sst2"} and set(headline["agr"]) == {"acc", "rollout", "flow"}
    assert headline["agr"]["acc"] == round(report.metrics["agreement"]["accuracy"], 3)
    blank_out = report.metrics["agreement"]["corr"]["blank_out"]
    assert headline["agr"]["flow"] == round(blank_out["flow"]["L6"], 3)  # the last layer


def test_metrics_json_and_mlflow_cells(built):
    stage_outputs, report = built
    on_disk = json.loads((stage_outputs / "reports" / "metrics.json").read_text())
    assert on_disk == report.metrics
    assert set(on_disk) == {"agreement", "sst2"}
    agreement = on_disk["agreement"]
    assert agreement["accuracy"] == 0.9375
    assert set(agreement["corr"]) == {"blank_out", "input_gradients"}
    assert set(agreement["corr"]["blank_out"]) == {"raw", "rollout", "flow"}
    assert list(agreement["corr"]["blank_out"]["raw"]) == [f"L{k}" for k in range(1, 7)]
    assert agreement["corr"]["blank_out"]["raw"]["L1"] == 0.59
    cells = report.cells
    # 2 tasks x 2 importances x 3 methods x 6 layers + 2 accuracies + one Δ per published cell (18+18+12)
    assert len(cells) == 72 + 2 + sum(len(t.layers) * 3 for t in TABLES)
    assert cells["agreement/corr/blank_out/raw/L1"] == 0.59
    assert cells["agreement/delta/blank_out/raw/L1"] == pytest.approx(-0.10)
    assert "sst2/delta/blank_out/raw/L1" not in cells  # no published counterpart


def test_html_figures_and_csv_exist_and_are_referenced(built):
    stage_outputs, report = built
    reports = stage_outputs / "reports"
    html = (reports / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<table>") >= 4 and 'class="far"' in html
    assert (reports / "report.md").read_text() == report.markdown
    names = sorted(p.name for p in (reports / "figures").glob("*.png"))
    assert names == sorted(p.name for p in report.figures)
    assert {
        "curves_agreement_blank_out.png",
        "curves_sst2_input_gradients.png",
        "heads_agreement.png",
    } <= set(names)
    for name in names:
        assert f"(figures/{name})" in report.markdown and f'src="figures/{name}"' in html
        assert (reports / "figures" / name).read_bytes()[:4] == b"\x89PNG"
    csv_lines = (reports / "comparison.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + sum(len(t.layers) * 3 for t in TABLES)


def test_examples_found_or_said_not_found_and_fixed_samples(built):
    md = built[1].markdown
    # "the article on NNP large systems" is agreement sample_id 13 (row 1)
    assert "figures/maps_agreement_example_13.png" in md
    assert "`here the NNS differ in that the female`: not found in the captured samples" in md
    assert "It is in the prepared split(s) agreement `train`; only captured samples have maps." in md
    # n_examples=2: first correct (sample 3) and first wrong (sample 23) of agreement
    assert re.findall(r"maps_agreement_sample_(\d+)\.png\)", md) == ["3", "23"]
    assert "gold plural, predicted singular (p=0.80), wrong" in md


def test_accuracy_section_and_config_switches(built):
    md = built[1].markdown
    assert "| agreement | test | 0.938 | 0.96 | 160 |" in md
    assert "| 2 | 20 | 0.800 |" in md  # accuracy by attractors
    # ours beside the authors' choice, with where it is in their code, and whether they agree
    row = next(line for line in md.splitlines() if line.startswith("| attribution.blank_token |"))
    assert row.startswith("| attribution.blank_token | pad | unk | Reflect d28ddd5") and row.endswith(
        "| **no** |"
    )
    assert "| attribution.gradient_reduction | abs_sum | abs_sum |" in md and "| yes |" in md
    assert "agreement accuracy: ours 0.938 vs paper 0.96 (Δ -0.02)" in md


def test_missing_task_inputs_are_said_not_fatal(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",), with_train=False)
    report = _build(tmp_path, n_examples=0)
    md = report.markdown
    assert "sst2: missing `" in md and "agreement: missing `" in md  # train_metrics.json
    assert "Table 3" in md and "no correlations for it" in md
    assert set(report.metrics) == {"agreement"} and "accuracy" not in report.metrics["agreement"]


def test_seed_aggregate_section_and_stale_figures_removed(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    stale = tmp_path / "reports" / "figures" / "maps_agreement_sample_999.png"  # from an earlier run
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    jobs = [correlations("agreement").assign(seed=seed, job=str(seed)) for seed in (0, 1)]
    jobs[0].loc[
        (jobs[0]["method"] == "flow") & (jobs[0]["layer"] == 3) & (jobs[0]["importance"] == "blank_out"),
        "mean",
    ] = 0.6
    jobs[1].loc[
        (jobs[1]["method"] == "flow") & (jobs[1]["layer"] == 3) & (jobs[1]["importance"] == "blank_out"),
        "mean",
    ] = 0.8
    sweep = study_paths(tmp_path).sweep
    sweep.parent.mkdir(parents=True)
    pd.concat(jobs).to_csv(sweep, index=False)
    md = _build(tmp_path, tasks=("agreement",), examples=[], n_examples=0).markdown
    assert not stale.exists()
    rows = md.split("## Seeds", 1)[1].splitlines()
    # flow L3 over seeds: mean 0.70, std sqrt(0.02) = 0.14, [0.60, 0.80], n=2; paper 0.70 -> Δ +0.00
    flow = next(r for r in rows if r.startswith("| Flow (seeds) |"))
    assert "0.70 ± 0.14 [0.60, 0.80] n=2" in flow
    delta = next(r for r in rows if r.startswith("| Flow Δ |"))
    assert [c.strip() for c in delta.strip("|").split("|")][3] == "+0.00"


def test_recipe_section_one_line_per_choice_with_accuracy_and_delta(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    paths = study_paths(tmp_path)
    jobs = []
    for job, (choice, flow_l3) in enumerate((("recipe=plain", 0.5), ("recipe=authors", 0.75))):
        table = correlations("agreement").assign(seed=0, job=str(job), overrides=choice)
        table.loc[
            (table["method"] == "flow") & (table["layer"] == 3) & (table["importance"] == "blank_out"), "mean"
        ] = flow_l3
        jobs.append(table)
    paths.recipes.parent.mkdir(parents=True)
    pd.concat(jobs).to_csv(paths.recipes, index=False)
    records = [
        {"job": "0", "seed": 0, "overrides": "recipe=plain seed=0", "recipe": "recipe=plain", "status": "finished",
         "accuracy": {"agreement": {"accuracy": 0.94, "teacher_accuracy": None}}},
        {"job": "1", "seed": 0, "overrides": "recipe=authors", "recipe": "recipe=authors", "status": "finished",
         "accuracy": {"agreement": {"accuracy": 0.95, "teacher_accuracy": 0.97}}},
    ]  # fmt: skip
    paths.recipe_jobs.write_text(json.dumps({"jobs": records}))
    md = _build(tmp_path, tasks=("agreement",), examples=[], n_examples=0).markdown
    rows = md.split("## Whole-run switches", 1)[1].split("\n## ", 1)[0].splitlines()
    plain = next(r for r in rows if r.startswith("| recipe=plain |") and "| Flow |" in r)
    authors = next(r for r in rows if r.startswith("| recipe=authors |") and "| Flow |" in r)
    # Table 1 flow L3 is 0.70 in the paper: 0.50 -> -0.20, 0.75 -> +0.05
    assert "0.940 (n/a)" in plain and "0.50 (-0.20)" in plain
    assert "0.950 (0.970)" in authors and "0.75 (+0.05)" in authors


def test_the_per_head_paragraph_counts_the_samples_of_the_subset_and_of_the_run(built):
    from attnflow.report.sections.heads import cell_samples

    assert (
        f"on a seeded subset of the samples (`explain.per_head_samples`): agreement {N} of {N}."
        in built[1].markdown
    )
    # under correlate.undefined=zero a cell averages every sample: the undefined ones are among its n
    cells = pd.DataFrame({"n": [200, 200, 197], "n_undefined": [0, 4, 3]})
    assert cell_samples(cells) == 200
