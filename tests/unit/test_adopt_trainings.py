"""scripts/adopt_trainings.py: a finished sweep's trainings enter the stage cache only under a key
that is true for them (committed code, the same training code files as this checkout)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from attnflow.paths import StudyPaths
from pipelines import _config, study

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("adopt_trainings", ROOT / "scripts" / "adopt_trainings.py")
adopt_trainings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adopt_trainings)

HEAD = subprocess.run(
    ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
).stdout.strip()


def tiny_classifier(folder: Path) -> Path:
    """A real exported agreement classifier (2 layers, 8 wide), as the train stage writes it."""
    import torch

    from attnflow.data.vocab import Vocab
    from attnflow.models import WordEncoder, save_classifier
    from attnflow.models.agreement import AgreementConfig, AgreementTransformer

    vocab = Vocab.build([["the", "dog", "dogs", "barks"]])
    torch.manual_seed(0)
    config = AgreementConfig(vocab_size=len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=8)
    return save_classifier(AgreementTransformer(config).eval(), WordEncoder(vocab), folder)


def _job(folder: Path, *, commit=HEAD, dirty=False, trained=True) -> Path:
    """A sweep job folder (seed 1, agreement only) as a finished job leaves it."""
    folder.mkdir(parents=True)
    cfg = _config.compose(["seed=1", "tasks=[agreement]", "tracking.enabled=false"])
    _config.write(cfg, folder / "params.yaml")
    (folder / "provenance.json").write_text(json.dumps({"commit": commit, "dirty": dirty, "code": {}}))
    paths = StudyPaths.from_config(cfg.paths, root=folder)
    prepared = paths.prepared_data("agreement")
    prepared.mkdir(parents=True)
    (prepared / "train.parquet").write_bytes(b"rows")
    if trained:
        tiny_classifier(paths.model("agreement"))
        for name, target in study.train.REPORTED.items():
            text = '{"accuracy": 0.9}' if name.endswith(".json") else name  # metrics.json is read
            (paths.model_dir("agreement") / name).write_text(text)
            paths.task_reports("agreement").mkdir(parents=True, exist_ok=True)
            (paths.task_reports("agreement") / target).write_text(text)
        paths.train_timing("agreement").write_text('{"train_wall_s": 2.0}')
    return folder


@pytest.mark.skipif(not HEAD, reason="needs the git checkout")
def test_an_adopted_training_is_what_a_sweep_of_this_checkout_takes(tmp_path, monkeypatch):
    if not adopt_trainings.same_training_code(HEAD):
        pytest.skip("this working tree's training code differs from HEAD's")
    job, cache = _job(tmp_path / "sweep" / "0"), tmp_path / "cache"
    ((task, what),) = adopt_trainings.adopt(job, cache)
    assert task == "agreement" and what.startswith("stored as ") and f"trained by {HEAD[:12]}" in what
    other = _job(tmp_path / "sweep2" / "0", trained=False)  # a later sweep's job: the same inputs
    monkeypatch.chdir(other)
    cfg = _config.load(other / "params.yaml")
    monkeypatch.setattr(study.train, "run", lambda *a: pytest.fail("trained again"))
    taken = study.train_or_reuse(cfg, "agreement", cache, commit="later")
    assert taken["reused"] is True and taken["trained_by"] == HEAD
    model = StudyPaths.from_config(cfg.paths, root=other).model_dir("agreement")
    stored = job / "models" / "agreement" / "model" / "model.safetensors"
    assert (model / "model" / "model.safetensors").read_bytes() == stored.read_bytes()


@pytest.mark.parametrize(
    ("job", "why"),
    [
        ({"dirty": True}, "uncommitted code"),
        ({"commit": "0" * 40}, "differs"),
        ({"trained": False}, "did not finish"),
    ],
)
def test_a_training_whose_key_would_not_be_true_is_refused(tmp_path, job, why):
    out = adopt_trainings.adopt(_job(tmp_path / "0", **job), tmp_path / "cache")
    assert len(out) == 1 and out[0][1].startswith("refused") and why in out[0][1]
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("folder", ["absent", "empty"])
def test_a_folder_that_is_not_a_sweep_is_named_and_nothing_is_stored(tmp_path, capsys, folder):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_:
        adopt_trainings.main([str(tmp_path / folder), "--cache", str(tmp_path / "cache")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert str(tmp_path / folder) in err and (
        "not a folder" in err if folder == "absent" else "no job folder" in err
    )
    assert not (tmp_path / "cache").exists()
