"""Training is repeatable: the same config and seed give the same bytes in every output file,
whatever the ambient torch thread count, the machine's load or the output folder's path.

Why each condition matters (measured, docs/determinism.md): torch's CPU kernels split matrix
products and reductions into one chunk per thread, so 1 and 2 threads round differently (the
distilled agreement model's first-epoch loss moved from 0.53766 to 0.53844); Lightning's
checkpoints held the fit's wall time and the absolute output folder.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnflow.lit import train_task
from attnflow.lit.train import canonical_checkpoint, torch_threads
from tests.integration.test_training import (  # noqa: F401  (agreement_data: a fixture)
    TIME_KEYS,
    TINY_MODEL,
    TINY_TRAIN,
    TRAINER,
    agreement_data,
)

DISTILLED = {**TINY_TRAIN, "max_epochs": 1, "teacher": "lstm"}  # the study's path: LSTM teacher, online


def _train(data: Path, out: Path, *, num_threads: int = 1, timing: Path | None = None) -> dict:
    return train_task(
        "agreement",
        data_dir=data,
        out_dir=out,
        model_cfg=TINY_MODEL,
        train_cfg=DISTILLED,
        trainer_cfg={**TRAINER, "num_threads": num_threads},
        seed=0,
        timing_path=timing,
    )


def _files(out: Path) -> dict[str, str]:
    """sha256 of every file below ``out``, by relative path."""
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "last.ckpt", weights_only=True)["state_dict"]


def test_every_output_byte_identical_across_thread_counts_load_and_folders(agreement_data, tmp_path):  # noqa: F811
    # run 1: one ambient thread, quiet; run 2: two ambient threads, a busy process beside it, another
    # folder. Before trainer.num_threads, the ambient count was the training's: the weights differed.
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        first = _train(agreement_data, tmp_path / "a", timing=tmp_path / "a_timing.json")
        torch.set_num_threads(2)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            second = _train(agreement_data, tmp_path / "elsewhere" / "b")
        finally:
            busy.kill()
            busy.wait()
        assert torch.get_num_threads() == 2  # the training's count was restored
    finally:
        torch.set_num_threads(before)
    assert first == second
    assert _files(tmp_path / "a") == _files(tmp_path / "elsewhere" / "b")  # checkpoints included
    assert set(json.loads((tmp_path / "a_timing.json").read_text())) == TIME_KEYS


@pytest.mark.slow
def test_the_thread_count_changes_the_weights(agreement_data, tmp_path):  # noqa: F811
    # why trainer.num_threads is a fixed setting and not the machine's core count
    _train(agreement_data, tmp_path / "one", num_threads=1)
    _train(agreement_data, tmp_path / "two", num_threads=2)
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert any(not torch.equal(one[k], two[k]) for k in one)


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="num_threads"):
        with torch_threads(0):
            pass


def test_canonical_checkpoint_drops_times_and_absolute_paths():
    ckpt = {
        "state_dict": {"w": torch.ones(1)},
        "callbacks": {
            "attnflow.RunRecorder": {"rows": [{"step": 1}], "wall_s": 3.5, "step_s": 2.0, "samples": 8},
            "ModelCheckpoint{...}": {
                "dirpath": "/home/a/models/agreement",
                "best_model_path": "/home/a/models/agreement/best.ckpt",
                "best_k_models": {"/home/a/models/agreement/best.ckpt": torch.tensor(0.9)},
                "kth_best_model_path": "",
                "best_model_score": torch.tensor(0.9),
            },
        },
    }
    out = canonical_checkpoint(ckpt)
    assert out["callbacks"]["attnflow.RunRecorder"] == {
        "rows": [{"step": 1}],
        "wall_s": 0.0,
        "step_s": 0.0,
        "samples": 8,
    }
    saved = out["callbacks"]["ModelCheckpoint{...}"]
    assert saved["dirpath"] == "." and saved["best_model_path"] == "best.ckpt"
    assert list(saved["best_k_models"]) == ["best.ckpt"] and saved["kth_best_model_path"] == ""
    assert ckpt["callbacks"]["attnflow.RunRecorder"]["wall_s"] == 3.5  # the input is untouched
