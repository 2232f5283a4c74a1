"""The report's Machines section: the AVX2 run's cells beside this machine's on the same sample, the
spreads computed from them, the determinism files, and "not measured" where a source is absent."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnflow.report.context import Context
from attnflow.report.document import Image, Paragraph, Table, render_markdown
from attnflow.report.inputs import TaskInputs
from attnflow.report.sections import machines
from tests.unit.report.conftest import correlations, study_paths

STEP = 0.1  # seed s of a machine = seed 0's cell + STEP * s: sd over seeds 0, 1, 2 = STEP exactly
SHIFT = 0.05  # the second machine = the first + SHIFT at every seed: machine spread = SHIFT


def _seeded(seed: int, shift: float = 0.0) -> pd.DataFrame:
    table = correlations("agreement")
    return table.assign(mean=table["mean"] + STEP * seed + shift)


def _write_archived(root) -> None:
    folder = study_paths(root).reports / machines.MACHINES / machines.ARCHIVED
    folder.mkdir(parents=True)
    _seeded(0).to_parquet(folder / machines.SEED0_TABLE, index=False)
    (folder / machines.SEED0_METRICS).write_text(json.dumps({"seed": 0, "cpu": {"capability": "AVX2"}}))
    sweep = pd.concat([_seeded(s).assign(seed=s, job=str(s - 1), commit="133b5ccce25c") for s in (1, 2)])
    sweep.to_csv(folder / machines.SWEEP_TABLE, index=False)


def _write_samples(root, statuses=("finished", "finished", "finished")) -> None:
    paths = study_paths(root)
    table = paths.sweep_table(machines.SAMPLES)
    table.parent.mkdir(parents=True)
    rows = pd.concat([_seeded(s, SHIFT).assign(seed=s, job=str(s), commit="feedbeef0000") for s in (0, 1, 2)])
    rows.to_csv(table, index=False)
    jobs = [{"job": str(s), "seed": s, "status": st} for s, st in enumerate(statuses)]
    paths.sweep_jobs_file(machines.SAMPLES).write_text(json.dumps({"jobs": jobs}))


def _determinism(root, name: str, capability: str, digest: str) -> None:
    settings = [
        {"dtype": "float32", "pin": "native", "capability": capability, "digest": digest, "digest_float32": digest,
         "losses": [0.5], "wall_s": 2.0, "cpu_s": 1.5, "max_abs_diff": 0.0, "first_loss_difference": None,
         "same_digest": True, "same_digest_float32": True},
        {"dtype": "float32", "pin": "avx2", "capability": "AVX2", "digest": "b" * 64, "digest_float32": "b" * 64,
         "losses": [0.6], "wall_s": 2.0, "cpu_s": 1.5, "max_abs_diff": 3e-7, "first_loss_difference": 0,
         "same_digest": False, "same_digest_float32": False},
    ]  # fmt: skip
    payload = {
        "machine": {"cpu": "Some CPU", "cpu_capability": capability, "packages": {"torch": "2.13.0"}},
        "recipe": {"train_items": 512, "epochs": 4, "threads": 1, "seed": 0},
        "settings": settings,
        "answer": {"float32": {"identical_across_pins": False, "identical_float32_rounded": False,
                               "max_abs_diff": 3e-7, "native_cost_s": 1.5, "cost_ratio": {"native": 1.0, "avx2": 1.0}}},
    }  # fmt: skip
    folder = study_paths(root).reports / machines.MACHINES
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(payload))


def _run(root) -> tuple[Context, str]:
    got = TaskInputs("agreement", train_metrics={"cpu": {"capability": "AVX512"}})
    ctx = Context(paths=study_paths(root), inputs={"agreement": got}, config={}, comparison=pd.DataFrame())
    machines.section(ctx)
    return ctx, render_markdown(ctx.blocks)


def _grid(ctx, number: int) -> list[list[str]]:
    return next(
        b.grid.rows for b in ctx.blocks if isinstance(b, Table) and f"Table {number}" in b.grid.caption
    )


def test_nothing_to_report_adds_nothing(tmp_path):
    ctx, _ = _run(tmp_path)
    assert ctx.blocks == []


def test_without_the_second_machine_the_machine_spread_is_not_measured_and_the_seed_spread_is(tmp_path):
    _write_archived(tmp_path)
    ctx, md = _run(tmp_path)
    assert "Machine spread: not measured in this run" in md
    # every cell: sd(x, x + 0.1, x + 0.2) = 0.1, on the one machine
    assert "Seed spread over 36 cells on AVX2 (133b5cc): mean 0.100, largest 0.100." in md
    assert "AVX2 (133b5cc): seeds [0, 1, 2], 40 samples per cell" in md
    assert _grid(ctx, 1)[0] == ["Raw", *["n/a / 0.100"] * 6]
    assert not any(isinstance(b, Image) for b in ctx.blocks)
    assert "Weights across instruction-set pins: not measured in this run" in md


def test_two_machines_give_the_shift_as_machine_spread_beside_the_seed_sd(tmp_path):
    _write_archived(tmp_path)
    _write_samples(tmp_path)
    ctx, md = _run(tmp_path)
    # machine spread |(x + 0.05 + 0.1 s) - (x + 0.1 s)| = 0.05 at every seed; seed sd 0.1 on both machines
    assert "Over 36 cells of Tables 1-2 (AVX2 (133b5cc) vs AVX512 (samples/))" in md
    assert "machine spread mean 0.050, largest 0.050; seed spread mean 0.100, largest 0.100" in md
    assert "The CPU moves 0 of the 36 cells further than a seed's standard deviation (0%)." in md
    assert _grid(ctx, 2)[2] == ["Flow", *["0.050 / 0.100"] * 6]
    assert "commit(s) feedbee" in md and "commit(s) 133b5cc" in md  # 7 hex digits
    (image,) = [b for b in ctx.blocks if isinstance(b, Image)]
    assert image.path == "figures/machine_spread.png"
    assert (study_paths(tmp_path).reports / "figures" / "machine_spread.png").is_file()


def test_a_job_that_did_not_finish_is_left_out(tmp_path):
    _write_archived(tmp_path)
    _write_samples(tmp_path, statuses=("finished", "finished", "failed"))
    _, md = _run(tmp_path)
    assert "AVX512 (samples/): seeds [0, 1]" in md
    # this machine's sd over seeds 0, 1 = 0.1 / √2; seed spread = (0.1 + 0.0707) / 2 = 0.0854
    assert f"seed spread mean {0.5 * (0.1 + 0.1 / 2**0.5):.3f}" in md


def test_other_samples_are_flagged(tmp_path):
    _write_archived(tmp_path)
    _write_samples(tmp_path)
    table = study_paths(tmp_path).sweep_table(machines.SAMPLES)
    pd.read_csv(table).assign(n=100).to_csv(table, index=False)
    _, md = _run(tmp_path)
    assert "not the same sample" in md


def test_one_determinism_file_is_tabled_and_the_other_kind_is_not_measured(tmp_path):
    _determinism(tmp_path, "determinism-avx512.json", "AVX512", "a" * 64)
    ctx, md = _run(tmp_path)
    rows = next(b.grid.rows for b in ctx.blocks if isinstance(b, Table))
    assert rows[0] == ["float32", "native", "AVX512", "a" * 12, "yes", "0.0e+00", "none", "1.5"]
    assert rows[1] == ["float32", "avx2", "AVX2", "b" * 12, "no", "3.0e-07", "1", "1.5"]
    assert "in float32 the pins give different weights (largest |Δw| 3.0e-07)" in md
    assert "The same settings on another CPU kind: not measured in this run" in md


@pytest.mark.parametrize(("digest", "word"), [("a" * 64, "identical"), ("c" * 64, "different")])
def test_two_cpu_kinds_are_compared_setting_by_setting(tmp_path, digest, word):
    _determinism(tmp_path, "determinism-avx512.json", "AVX512", "a" * 64)
    _determinism(tmp_path, "determinism-avx2.json", "AVX2", digest)
    _, md = _run(tmp_path)
    assert f"float32 native: {word} across 2 files" in md
    assert "float32 avx2: identical across 2 files" in md  # both files' avx2 pins hash alike here


def test_every_paragraph_is_generated_text_with_no_placeholder(tmp_path):
    _write_archived(tmp_path)
    _write_samples(tmp_path)
    _determinism(tmp_path, "determinism-avx512.json", "AVX512", "a" * 64)
    ctx, _ = _run(tmp_path)
    texts = [b.text for b in ctx.blocks if isinstance(b, Paragraph)]
    assert texts and not any("{" in t or "None" in t for t in texts)
