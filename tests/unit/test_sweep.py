"""stack_jobs: finished jobs stacked with seed, job and recipe overrides; failed ones named; accuracy per job."""

from __future__ import annotations

import json

import pandas as pd
import yaml

from attnflow.paths import StudyPaths
from attnflow.sweep import stack_jobs

PATHS = {"raw": "data/raw", "prepared": "data/prepared", "models": "models", "capture": "outputs/capture",
         "explain": "outputs/explain", "attribute": "outputs/attribute", "reports": "reports"}  # fmt: skip


def _job(sweep, number, overrides, *, mean=None, error=None):
    job = sweep / str(number)
    (job / ".hydra").mkdir(parents=True)
    seed = next((int(o.split("=")[1]) for o in overrides if o.startswith("seed=")), 0)
    (job / "params.yaml").write_text(yaml.safe_dump({"seed": seed}))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    paths = StudyPaths.from_config(PATHS, root=job)
    if error:
        (job / "error.txt").write_text(f"Traceback ...\n{error}\n")
    if mean is not None:
        paths.correlations("agreement").parent.mkdir(parents=True)
        row = {"task": "agreement", "importance": "blank_out", "method": "flow", "head": None, "layer": 1,
               "variant": "configured", "mean": mean}  # fmt: skip
        pd.DataFrame([row]).to_parquet(paths.correlations("agreement"))
        metrics = {"accuracy": 0.9, "teacher": {"accuracy": 0.95},
                   "extra_eval": {"attractors": {"accuracy_by_attractors": {"1": 0.8}}}, "n_train": 120}  # fmt: skip
        paths.train_metrics("agreement").write_text(json.dumps(metrics))


def test_recipe_sweep_is_stacked_under_its_name_with_overrides_and_accuracy(tmp_path):
    sweep = tmp_path / "multirun"
    _job(sweep, 0, ["recipe=plain", "seed=0"], mean=0.5)
    _job(sweep, 1, ["recipe=authors", "seed=0"], mean=0.7)
    _job(sweep, 2, ["recipe=authors", "seed=1"], error="ValueError: boom")
    out = StudyPaths.from_config(PATHS, root=tmp_path)
    report = stack_jobs(sweep, PATHS, ["agreement"], out, name="recipes")
    stacked = pd.read_csv(out.recipes)
    assert stacked[["job", "seed", "overrides", "mean"]].values.tolist() == [
        [0, 0, "recipe=plain", 0.5],
        [1, 0, "recipe=authors", 0.7],
    ]
    assert not out.sweep.exists()  # a named sweep leaves the seed sweep's files alone
    assert [j["error"] for j in report["failed"]] == ["ValueError: boom"]
    jobs = json.loads(out.recipe_jobs.read_text())["jobs"]
    assert [j["recipe"] for j in jobs] == ["recipe=plain", "recipe=authors", "recipe=authors"]
    assert jobs[0]["accuracy"] == {
        "agreement": {"accuracy": 0.9, "teacher_accuracy": 0.95, "accuracy_by_attractors": {"1": 0.8}, "n_train": 120}
    }


def test_a_job_refused_before_writing_its_params_is_named_as_failed(tmp_path):
    sweep = tmp_path / "multirun"
    _job(sweep, 0, ["seed=0"], mean=0.5)
    refused = sweep / "1"
    (refused / ".hydra").mkdir(parents=True)
    (refused / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=-1"]))
    (refused / "error.txt").write_text("Traceback ...\nConfigError: config: seed=-1: must be >= 0\n")
    report = stack_jobs(sweep, PATHS, ["agreement"], StudyPaths.from_config(PATHS, root=tmp_path))
    assert report["seeds"] == [0]
    assert [(j["job"], j["seed"], j["error"]) for j in report["failed"]] == [
        ("1", -1, "ConfigError: config: seed=-1: must be >= 0")
    ]
