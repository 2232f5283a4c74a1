"""A sweep job takes a training of identical inputs from the stage cache (pipelines.study.train_or_reuse):
the stored model, timing and reported copies in place of a run; any changed input trains again."""

from __future__ import annotations

import json

import pytest

from attnflow.paths import StudyPaths
from pipelines import _config, study


@pytest.fixture()
def job(tmp_path, monkeypatch):
    """A job folder with prepared data, and train.run replaced by a stand-in that counts its runs."""
    monkeypatch.chdir(tmp_path)
    runs = []

    def fake_train(cfg, task):
        paths = StudyPaths.from_config(cfg.paths)
        model = paths.model_dir(task)
        (model / "model").mkdir(parents=True, exist_ok=True)
        (model / "model" / "weights.bin").write_bytes(bytes([cfg.seed, len(runs)]))
        for name in study.train.REPORTED:
            (model / name).write_text(f"{name} seed {cfg.seed} run {len(runs)}")
            (paths.task_reports(task)).mkdir(parents=True, exist_ok=True)
            (paths.task_reports(task) / study.train.REPORTED[name]).write_text((model / name).read_text())
        paths.train_timing(task).write_text('{"train_wall_s": 1.0}')
        runs.append((task, cfg.seed))

    monkeypatch.setattr(study.train, "run", fake_train)

    def make(folder, seed=0):
        monkeypatch.chdir(tmp_path)
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        cfg = _config.compose([f"seed={seed}", "tracking.enabled=false"])
        prepared = StudyPaths.from_config(cfg.paths).prepared_data("agreement")
        prepared.mkdir(parents=True)
        (prepared / "train.parquet").write_bytes(b"rows")
        return cfg

    return make, runs, tmp_path / "cache"


def test_the_second_job_of_the_same_inputs_takes_the_first_ones_training(job):
    make, runs, cache = job
    first = study.train_or_reuse(make("0"), "agreement", cache, commit="c0")
    assert first["reused"] is False and runs == [("agreement", 0)]
    second = study.train_or_reuse(make("1"), "agreement", cache, commit="c1")
    assert runs == [("agreement", 0)]  # not trained again
    assert second == {"key": first["key"], "reused": True, "trained_by": "c0"}
    for folder in ("0", "1"):
        paths = StudyPaths.from_config(_config.compose([]).paths, root=cache.parent / folder)
        assert (paths.model_dir("agreement") / "model" / "weights.bin").read_bytes() == bytes([0, 0])
        for name, target in study.train.REPORTED.items():
            assert (paths.task_reports("agreement") / target).read_text() == f"{name} seed 0 run 0"
        assert json.loads(paths.train_timing("agreement").read_text()) == {"train_wall_s": 1.0}


def test_another_seed_or_other_data_trains_again(job):
    make, runs, cache = job
    study.train_or_reuse(make("0"), "agreement", cache, commit="c0")
    study.train_or_reuse(make("1", seed=1), "agreement", cache, commit="c0")
    cfg = make("2")
    (StudyPaths.from_config(cfg.paths).prepared_data("agreement") / "train.parquet").write_bytes(
        b"other rows"
    )
    study.train_or_reuse(cfg, "agreement", cache, commit="c0")
    assert runs == [("agreement", 0), ("agreement", 1), ("agreement", 0)]
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3


def test_the_key_covers_the_code_dvc_yaml_lists_for_training(job, monkeypatch):
    make, _, _ = job
    cfg = make("0")
    seen = {}

    def spy(inputs, params, machine):
        seen.update(inputs=inputs, params=params)
        return "k"

    from attnflow import stage_cache

    monkeypatch.setattr(stage_cache, "stage_key", spy)
    assert study.train_key(cfg, "agreement") == "k"
    from pipelines import dvc_deps

    assert set(seen["inputs"]) == {*dvc_deps.stage_deps("train", []), "prepared"}
    assert set(seen["params"]) == {"seed", "trainer", "task.agreement.model", "task.agreement.train"}


def test_a_fill_job_stops_after_training_and_stores_it(job, monkeypatch):
    make, runs, cache = job
    ran = []
    for stage in study.TASK_STAGES:
        if stage is not study.train:
            monkeypatch.setattr(stage, "run", lambda cfg, task, name=stage.__name__: ran.append(name))
    monkeypatch.setattr(study, "train_cache", lambda: cache)
    monkeypatch.setattr(study, "fill_only", lambda: True)
    cfg = make("0")
    cfg.tasks = ["agreement"]
    study.run(cfg)
    assert runs == [("agreement", 0)]
    assert ran == ["pipelines.download", "pipelines.prepare"]  # nothing after train
    assert study.train_or_reuse(make("1"), "agreement", cache, commit="c1")["reused"] is True


def test_a_fill_that_would_aggregate_is_refused_naming_the_override():
    assert study.fill_requested({"reuse": {"fill": False}, "aggregate": {}}) is False
    assert study.fill_requested({"reuse": {"fill": True}}) is True
    with pytest.raises(ValueError, match=r"~hydra.callbacks.aggregate"):
        study.fill_requested({"reuse": {"fill": True}, "aggregate": {"into": "sweep"}})
