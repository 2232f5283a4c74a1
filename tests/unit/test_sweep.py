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
        "agreement": {
            "accuracy": 0.9,
            "teacher_accuracy": 0.95,
            "accuracy_by_attractors": {"1": 0.8},
            "n_train": 120,
        }
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


def _git(root, *args):
    import subprocess

    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _repo(tmp_path):
    """A tiny repository with the three code folders and a doc, committed."""
    root = tmp_path / "repo"
    for name, text in {
        "src/a.py": "x = 1\n",
        "pipelines/s.py": "y = 2\n",
        "conf/c.yaml": "k: 1\n",
        "README.md": "r\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root.parent, "init", "-q", str(root))
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    return root


def test_code_state_names_the_commit_and_digests_the_code_not_the_docs(tmp_path):
    from attnflow.sweep import code_state

    root = _repo(tmp_path)
    clean = code_state(root)
    assert (
        len(clean["commit"]) == 40
        and clean["dirty"] is False
        and set(clean["code"]) == {"src", "pipelines", "conf"}
    )
    (root / "README.md").write_text("changed\n")  # not code: same digests, still clean
    assert code_state(root) == clean
    (root / "conf" / "c.yaml").write_text("k: 2\n")  # code: conf's digest and the dirty flag change
    dirty = code_state(root)
    assert dirty["dirty"] is True and dirty["commit"] == clean["commit"]
    assert [f for f in clean["code"] if clean["code"][f] != dirty["code"][f]] == ["conf"]
    (root / "src" / "new.py").write_text("z = 3\n")  # an untracked source file is code too
    assert code_state(root)["code"]["src"] != clean["code"]["src"]


def test_jobs_carry_their_code_and_the_tables_their_commit(tmp_path):
    sweep = tmp_path / "multirun"
    _job(sweep, 0, ["seed=1"], mean=0.5)
    _job(sweep, 1, ["seed=2"], mean=0.6)
    state = {"commit": "a" * 40, "dirty": True, "code": {"src": "1", "pipelines": "2", "conf": "3"}}
    (sweep / "0" / "provenance.json").write_text(json.dumps(state))  # job 1 ran before provenance existed
    out = StudyPaths.from_config(PATHS, root=tmp_path)
    report = stack_jobs(sweep, PATHS, ["agreement"], out)
    assert [j["provenance"] for j in report["jobs"]] == [state, None]
    stacked = pd.read_csv(out.sweep)
    assert stacked["commit"].tolist()[0] == "a" * 12 + "+dirty" and pd.isna(stacked["commit"].tolist()[1])


def test_mixed_code_names_each_folder_and_run_that_differ():
    from attnflow.sweep import mixed_code

    a = {"commit": "a" * 40, "dirty": False, "code": {"src": "1", "pipelines": "2", "conf": "3"}}
    same_code_other_commit = {**a, "commit": "b" * 40}  # e.g. a commit that changed only docs
    other = {**a, "commit": "c" * 40, "code": {"src": "9", "pipelines": "2", "conf": "3"}}
    assert mixed_code({"main": a, "job 0": same_code_other_commit}) == []
    assert mixed_code({"main": a, "job 0": same_code_other_commit, "job 1": other}) == [
        f"src/: main ({'a' * 12}) differs from job 1 ({'c' * 12})"
    ]
    assert "job 1: no record" in mixed_code({"main": a, "job 1": None})[0]
