"""Lightning DDP on 2 CPU processes (gloo): the multi-GPU code path, exercised without a GPU.

The tiny agreement model is trained once in one process (batch 16) and once under
``strategy=ddp`` with ``devices=2`` (batch 8 per process: the same 16 per optimiser step, the data
split between the ranks by Lightning's distributed sampler). Rank 0 writes the metrics; they must
match the single process's within ``TOLERANCE`` (the ranks see the batches in another order, so the
numbers are close, not equal).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.test_training import TINY_MODEL, TINY_TRAIN, TRAINER, agreement_data  # noqa: F401

pytestmark = pytest.mark.slow

TOLERANCE = 0.1  # test accuracy, absolute
EPOCHS = 4

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from attnflow.lit import train_task

    data, out, model, train, trainer = sys.argv[1:6]
    metrics = train_task("agreement", data_dir=data, out_dir=out, model_cfg=json.loads(model),
                         train_cfg=json.loads(train), trainer_cfg=json.loads(trainer), seed=0)
    if metrics:  # rank 0
        print("METRICS " + json.dumps(metrics))
    """
)


def _run(tmp_path: Path, data: Path, name: str, *, devices: int, strategy: str, batch_size: int) -> dict:
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    train = {**TINY_TRAIN, "max_epochs": EPOCHS, "batch_size": batch_size}
    trainer = {**TRAINER, "devices": devices, "strategy": strategy, "num_workers": 0}
    args = [str(data), str(tmp_path / name), json.dumps(TINY_MODEL), json.dumps(train), json.dumps(trainer)]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("METRICS ")]
    return json.loads(line.removeprefix("METRICS "))


def test_ddp_on_two_cpu_processes_matches_the_single_process_run(agreement_data, tmp_path):  # noqa: F811
    single = _run(tmp_path, agreement_data, "single", devices=1, strategy="auto", batch_size=16)
    ddp = _run(tmp_path, agreement_data, "ddp", devices=2, strategy="ddp", batch_size=8)
    assert ddp["n_eval"] == single["n_eval"]  # rank 0 evaluated the whole test split
    assert abs(ddp["accuracy"] - single["accuracy"]) <= TOLERANCE, (ddp["accuracy"], single["accuracy"])
    assert (tmp_path / "ddp" / "model").is_dir() and (tmp_path / "ddp" / "last.ckpt").is_file()
