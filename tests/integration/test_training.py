"""train_task on tiny fixtures: it learns, writes its fixed outputs, is deterministic and resumes.

Tiny agreement data: "the <subject> (near the <attractor>)* (big)?" with the label set by the
subject's number, so a 2-layer model can learn it in a few epochs on the CPU.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pandas as pd
import pytest
import pytorch_lightning as pl
import torch

from attnflow.data.vocab import Vocab
from attnflow.lit import train_task
from attnflow.models import load_classifier
from pipelines import _config

STUDY = _config.compose(["recipe=plain"])  # the study's values (plain recipe: these test training itself; the
# distilled default is trained in tests/e2e and tests/unit/test_distill_loss.py), overridden below for a tiny run
TINY_MODEL = {
    **_config.to_dict(STUDY.task.agreement.model),
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 16,
    "block_size": 16,
    "teacher": {
        "embedding_dim": 16,
        "hidden_size": 16,
        "num_layers": 2,
        "input_dropout": 0.2,
        "hidden_dropout": 0.3,
    },
}
TINY_TRAIN = {
    **_config.to_dict(STUDY.task.agreement.train),
    "max_epochs": 3,
    "batch_size": 16,
    "lr": 3e-3,
    "warmup_ratio": 0.1,
    "patience": 10,
    "teacher": "none",
}
TRAINER = {
    **_config.to_dict(STUDY.trainer),
    "progress_bar": False,
    "log_every_n_steps": 1,
    "accelerator": "cpu",
    "devices": 1,
}
SST2_MODEL = {**_config.to_dict(STUDY.task.sst2.model), "freeze_embeddings": False}
SINGULAR, PLURAL = ["dog", "cat", "boy"], ["dogs", "cats", "boys"]
TIME_KEYS = {"train_wall_s", "train_samples_per_s"}


def _sentence(rng: random.Random) -> tuple[str, int, int]:
    label = rng.randrange(2)
    subject = rng.choice(PLURAL if label else SINGULAR)
    k = rng.randrange(3)
    attractors = [rng.choice(SINGULAR if label else PLURAL) for _ in range(k)]
    words = ["the", subject, *(w for a in attractors for w in ("near", "the", a))]
    if rng.random() < 0.3:
        words.append("big")
    return " ".join(words), label, k


def _write_split(path: Path, n: int, rng: random.Random) -> None:
    rows = [_sentence(rng) for _ in range(n)]
    pd.DataFrame(
        {
            "text": [r[0] for r in rows],
            "label": pd.Series([r[1] for r in rows], dtype="int8"),
            "n_attractors": pd.Series([r[2] for r in rows], dtype="int8"),
            "source": "fixture",
        }
    ).to_parquet(path)


@pytest.fixture(scope="module")
def agreement_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agreement")
    rng = random.Random(0)
    for split, n in (("train", 192), ("val", 64), ("test", 64), ("attractors", 32)):
        _write_split(root / f"{split}.parquet", n, rng)
    Vocab.build([["the", "near", "big", *SINGULAR, *PLURAL]]).save(root / "vocab.json")
    return root


def _train(data: Path, out: Path, **train_overrides) -> dict:
    return train_task(
        "agreement",
        data_dir=data,
        out_dir=out,
        model_cfg=TINY_MODEL,
        train_cfg={**TINY_TRAIN, **train_overrides.pop("train", {})},
        trainer_cfg=TRAINER,
        seed=train_overrides.pop("seed", 0),
        **train_overrides,
    )


def _curve(out: Path) -> list[dict[str, str]]:
    with (out / "curve.csv").open() as f:
        return list(csv.DictReader(f))


def _stable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in TIME_KEYS}


@pytest.fixture(scope="module")
def trained(agreement_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("run")
    return out, _train(agreement_data, out)


def test_training_writes_every_output_at_its_fixed_path(trained):
    out, metrics = trained
    for name in ("best.ckpt", "last.ckpt", "metrics.json", "curve.csv", "curve.png", "model"):
        assert (out / name).exists(), name
    assert json.loads((out / "metrics.json").read_text()) == metrics
    for key in ("accuracy", "accuracy_by_attractors", "epochs", "best_epoch", "n_train"):
        assert key in metrics, key
    assert not TIME_KEYS & set(metrics)  # times differ run to run: they go to timing_path instead
    assert set(metrics["accuracy_by_attractors"]) == {"0", "1", "2"}
    assert metrics["n_train"] == 192 and metrics["epochs"] == 3 and metrics["eval_split"] == "test"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_loss_decreases(trained):
    out, _ = trained
    rows = _curve(out)
    assert list(rows[0]) == ["step", "epoch", "train_loss", "val_loss", "val_acc"]
    assert len(rows) == 3
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])


def test_last_checkpoint_follows_every_epoch_even_without_improvement(agreement_data, tmp_path):
    # lr = 0: val_acc never improves after epoch 0, so best.ckpt stays at epoch 0; last.ckpt must not
    metrics = _train(agreement_data, tmp_path, train={"lr": 0.0, "max_epochs": 3})
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    best = torch.load(tmp_path / "best.ckpt", weights_only=True)
    assert (last["epoch"], best["epoch"]) == (2, 0)
    assert last["attnflow"]["finished"] and not best["attnflow"]["finished"]
    assert metrics["best_epoch"] == 0 and metrics["epochs"] == 3


def test_checkpoints_load_without_pickled_code(trained):
    out, _ = trained
    for name in ("best.ckpt", "last.ckpt"):
        ckpt = torch.load(out / name, map_location="cpu", weights_only=True)
        assert "state_dict" in ckpt and "attnflow" in ckpt


def test_exported_model_reloads_with_identical_outputs(trained, agreement_data):
    out, metrics = trained
    model, encoder = load_classifier(out / "model")
    state = torch.load(out / "best.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    reference, _ = load_classifier(out / "model")
    reference.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    test = pd.read_parquet(agreement_data / "test.parquet")
    batch = encoder.encode(test["text"].tolist())
    logits = model(batch["input_ids"], batch["attention_mask"]).logits
    assert torch.equal(logits, reference(batch["input_ids"], batch["attention_mask"]).logits)
    accuracy = (logits.argmax(-1) == torch.tensor(test["label"].to_numpy(), dtype=torch.long)).float().mean()
    assert accuracy.item() == pytest.approx(metrics["accuracy"])


def test_same_seed_gives_identical_metrics(trained, agreement_data, tmp_path):
    _, first = trained
    again = _train(agreement_data, tmp_path)
    assert again == first
    assert _curve(tmp_path) == _curve(trained[0])


class _Kill(pl.Callback):
    """Simulates a crash: raises in the middle of training, after ``at_step`` optimiser steps."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at_step:
            raise RuntimeError("simulated kill")


def test_resume_after_kill_equals_uninterrupted_run(trained, agreement_data, tmp_path):
    _, uninterrupted = trained
    # 192 / 16 = 12 steps per epoch: die in the middle of the second epoch
    with pytest.raises(RuntimeError, match="simulated kill"):
        _train(agreement_data, tmp_path, callbacks=[_Kill(at_step=18)])
    assert (tmp_path / "last.ckpt").is_file() and not (tmp_path / "metrics.json").exists()
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 12
    resumed = _train(agreement_data, tmp_path)
    assert _stable(resumed) == _stable(uninterrupted)
    assert _curve(tmp_path) == _curve(trained[0])


def test_rerun_of_a_finished_run_trains_again_from_scratch(trained, agreement_data, tmp_path, capfd):
    # a finished checkpoint is never continued (dvc repro -f must retrain); same code, same result
    _, first = trained
    _train(agreement_data, tmp_path, train={"max_epochs": 3})
    before = (tmp_path / "last.ckpt").stat().st_mtime_ns
    capfd.readouterr()
    again = _train(agreement_data, tmp_path)
    assert "is a finished run: training again from scratch" in capfd.readouterr().err
    assert _stable(again) == _stable(first)
    assert (tmp_path / "last.ckpt").stat().st_mtime_ns != before
    assert not list(tmp_path.glob(".*.previous"))  # the old checkpoints were dropped once replaced


def test_checkpoint_from_another_config_is_not_resumed(trained, agreement_data, tmp_path, capfd):
    _train(agreement_data, tmp_path, train={"max_epochs": 1})
    capfd.readouterr()
    metrics = _train(agreement_data, tmp_path, train={"max_epochs": 2})
    assert "written by a different config, seed, data or code" in capfd.readouterr().err
    assert metrics["epochs"] == 2


def test_unreadable_checkpoint_gives_a_clear_error(agreement_data, tmp_path):
    (tmp_path / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match=r"last\.ckpt.*resume=false"):
        _train(agreement_data, tmp_path)


def test_unknown_or_missing_config_key_is_named(agreement_data, tmp_path):
    with pytest.raises(ValueError, match=r"task.agreement.model: unknown keys \['n_layers'\]"):
        train_task(
            "agreement", data_dir=agreement_data, out_dir=tmp_path, model_cfg={**TINY_MODEL, "n_layers": 2},
            train_cfg=TINY_TRAIN, trainer_cfg=TRAINER,
        )  # fmt: skip
    without_lr = {k: v for k, v in TINY_TRAIN.items() if k != "lr"}
    with pytest.raises(ValueError, match=r"task.agreement.train: missing keys \['lr'\]"):
        train_task(
            "agreement", data_dir=agreement_data, out_dir=tmp_path, model_cfg=TINY_MODEL,
            train_cfg=without_lr, trainer_cfg=TRAINER,
        )  # fmt: skip
    assert not list(tmp_path.iterdir())  # refused before touching anything


def test_logger_receives_metrics_not_a_second_copy_of_params(agreement_data, tmp_path):
    from pytorch_lightning.loggers import Logger

    class Recorder(Logger):
        name, version = "rec", 0

        def __init__(self):
            super().__init__()
            self.params, self.metrics = {}, {}

        def log_hyperparams(self, params, *args, **kwargs):
            self.params.update(params)

        def log_metrics(self, metrics, step=None):
            self.metrics.update(metrics)

    logger = Recorder()
    _train(agreement_data, tmp_path, train={"max_epochs": 1}, logger=logger)
    assert logger.params == {}  # the stage's run already holds the whole config as params: not twice
    assert {"train_loss", "val_acc", "test_acc", "test_acc_attractors_0"} <= set(logger.metrics)


# --- SST-2 ----------------------------------------------------------------------------------

from tests._tiny import make_tiny_bert as _tiny_bert  # noqa: E402


@pytest.fixture(scope="module")
def sst2_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sst2")
    rng = random.Random(1)

    def rows(n):
        out = []
        for _ in range(n):
            label = rng.randrange(2)
            words = ["the", *(["very"] * rng.randrange(2)), "good" if label else "bad", "movie"]
            out.append((" ".join(words), label))
        return pd.DataFrame(
            {"text": [t for t, _ in out], "label": pd.Series([y for _, y in out], dtype="int8")}
        )

    rows(96).to_parquet(root / "train.parquet")
    rows(32).to_parquet(root / "dev.parquet")
    return root


def test_sst2_already_finetuned_checkpoint_is_evaluated_not_trained(sst2_data, tmp_path):
    pretrained = _tiny_bert(tmp_path / "pretrained")
    out = tmp_path / "out"
    metrics = train_task(
        "sst2",
        data_dir=sst2_data,
        out_dir=out,
        model_cfg={**SST2_MODEL, "pretrained": str(pretrained)},
        train_cfg=_config.to_dict(STUDY.task.sst2.train),
        trainer_cfg=TRAINER,
    )
    assert metrics["trained"] is False and metrics["eval_split"] == "dev" and metrics["n_eval"] == 32
    assert "accuracy_by_attractors" not in metrics
    for name in ("best.ckpt", "last.ckpt", "metrics.json", "curve.csv", "curve.png"):
        assert (out / name).exists(), name
    _, encoder = load_classifier(out / "model")
    assert encoder.encode(["good movie"])["tokens"][0] == ["[CLS]", "good", "movie", "[SEP]"]


def test_sst2_finetuning_learns_on_a_carved_validation_set(sst2_data, tmp_path):
    pretrained = _tiny_bert(tmp_path / "pretrained")
    metrics = train_task(
        "sst2",
        data_dir=sst2_data,
        out_dir=tmp_path / "out",
        model_cfg={**SST2_MODEL, "pretrained": str(pretrained), "finetune": True},
        train_cfg={**TINY_TRAIN, "lr": 1e-2, "max_epochs": 3, "val_size": 16, "train_subset": 64},
        trainer_cfg=TRAINER,
    )
    assert metrics["trained"] is True and metrics["n_train"] == 64 and metrics["epochs"] == 3
    rows = _curve(tmp_path / "out")
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])


# --- online distillation (issue: replication) ---------------------------------------------------


def test_distilled_run_trains_teacher_and_student_and_exports_the_student(agreement_data, tmp_path):
    metrics = _train(
        agreement_data, tmp_path, train={"teacher": "lstm", "distill_rate": 0.9, "max_epochs": 2}
    )
    assert {"accuracy", "val_accuracy"} <= set(metrics["teacher"]) and 0.0 <= metrics["teacher"][
        "accuracy"
    ] <= 1.0
    rows = _curve(tmp_path)
    assert "teacher_val_acc" in rows[0] and len(rows) == 2
    ckpt = torch.load(tmp_path / "best.ckpt", weights_only=True)["state_dict"]
    assert any(k.startswith("teacher.") for k in ckpt) and any(k.startswith("model.") for k in ckpt)
    model, _ = load_classifier(tmp_path / "model")  # the student, as capture / explain / attribute load it
    assert type(model).__name__ == "AgreementTransformer"
    again = _train(
        agreement_data, tmp_path / "again", train={"teacher": "lstm", "distill_rate": 0.9, "max_epochs": 2}
    )
    assert _stable(again) == _stable(metrics)  # same seed, same numbers


def test_attractor_set_is_scored_after_training(trained, agreement_data):
    _, metrics = trained
    attractors = pd.read_parquet(agreement_data / "attractors.parquet")
    extra = metrics["extra_eval"]["attractors"]
    assert extra["n"] == len(attractors) == sum(extra["n_by_attractors"].values())
    assert set(extra["n_by_attractors"]) == {str(k) for k in attractors["n_attractors"].unique()}


def _train_in_a_fresh_process(data: Path, out: Path, *, kill_at_step: int | None = None):
    """Train in a new interpreter (the state a real re-run starts from); SIGKILL at a step if asked."""
    import subprocess
    import sys

    script = f"""
import json, os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from pathlib import Path
import pytorch_lightning as pl
from tests.integration.test_training import _train

class Die(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if {kill_at_step!r} is not None and trainer.global_step >= {kill_at_step!r}:
            os.kill(os.getpid(), signal.SIGKILL)

print(json.dumps(_train(Path({str(data)!r}), Path({str(out)!r}), callbacks=[Die()])))
"""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # two training processes (~25 s): the long tier of .ci/run
def test_sigkill_mid_epoch_then_resume_gives_the_identical_model(agreement_data, tmp_path):
    """A real SIGKILL (no cleanup at all) in the middle of the second epoch, with dropout,
    length bucketing and several epochs; the re-run resumes from last.ckpt (end of epoch 1) and
    must end with the uninterrupted run's weights and metrics (issue: hardening, case 11). Every
    run is a fresh process, as a real re-run is (not this test process, whose earlier tests may
    have left other kernels warm)."""
    import json

    killed = _train_in_a_fresh_process(agreement_data, tmp_path / "killed", kill_at_step=18)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert torch.load(tmp_path / "killed" / "last.ckpt", weights_only=True)["global_step"] == 12
    runs = {}
    for name in ("killed", "uninterrupted"):
        done = _train_in_a_fresh_process(agreement_data, tmp_path / name)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert _stable(runs["killed"]) == _stable(runs["uninterrupted"])
    assert _curve(tmp_path / "killed") == _curve(tmp_path / "uninterrupted")
    a = torch.load(tmp_path / "killed" / "best.ckpt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "uninterrupted" / "best.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- hardening: stale models and lost checkpoints (issue: hardening, cases 1 and 2) --------------


def test_a_code_change_makes_the_checkpoint_foreign_and_retrains(
    trained, agreement_data, tmp_path, monkeypatch, capfd
):
    import shutil

    from attnflow.lit import checkpoints

    out, _ = trained
    shutil.copytree(out, tmp_path / "run")
    # an interrupted-looking checkpoint of the same config: still foreign once the code changed
    ckpt = torch.load(tmp_path / "run" / "last.ckpt", weights_only=True)
    ckpt["attnflow"]["finished"] = False
    torch.save(ckpt, tmp_path / "run" / "last.ckpt")
    monkeypatch.setattr(checkpoints, "source_digest", lambda packages=(): "edited code")
    capfd.readouterr()
    _train(agreement_data, tmp_path / "run")
    assert (
        "written by a different config, seed, data or code: training from scratch" in capfd.readouterr().err
    )


def test_a_failing_fresh_run_gives_the_old_checkpoints_back(trained, agreement_data, tmp_path):
    import shutil

    out, _ = trained
    shutil.copytree(out, tmp_path / "run")
    before = {n: (tmp_path / "run" / n).read_bytes() for n in ("last.ckpt", "best.ckpt")}

    class Boom(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            raise RuntimeError("the optimiser refused a value")

    with pytest.raises(RuntimeError, match="refused"):
        _train(agreement_data, tmp_path / "run", train={"lr": 0.5}, callbacks=[Boom()])  # another config
    assert {n: (tmp_path / "run" / n).read_bytes() for n in before} == before
    assert not list((tmp_path / "run").glob(".*.previous"))
