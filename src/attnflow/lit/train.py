"""Train one task's classifier and write its fixed outputs: the entry point of the ``train`` stage.

``train_task`` writes into ``out_dir``: ``best.ckpt`` and ``last.ckpt`` (Lightning checkpoints,
for resume), ``model/`` (pickle-free export, see :func:`attnflow.models.load_classifier`),
``metrics.json``, ``curve.csv`` (``step, epoch, train_loss, val_loss, val_acc``; one row per
validation) and ``curve.png``. Every file is written atomically.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import time
import warnings
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint
from torch import nn
from tqdm.auto import tqdm

from attnflow.data.vocab import Vocab
from attnflow.io import atomic_path, write_json
from attnflow.lit.config import MODEL_CONFIGS, TRAIN_CONFIGS, TrainConfig, from_dict
from attnflow.lit.data import TextClassificationDataModule
from attnflow.lit.module import ClassifierModule
from attnflow.models import (
    AgreementConfig,
    AgreementTransformer,
    HFClassifier,
    HFEncoder,
    WordEncoder,
    load_pretrained_tokenizer,
    save_classifier,
)

__all__ = ["CURVE_COLUMNS", "TASKS", "TaskSpec", "build_model", "evaluate", "train_task"]

log = logging.getLogger(__name__)

CURVE_COLUMNS = ("step", "epoch", "train_loss", "val_loss", "val_acc")
# keys that change neither the trained weights nor the metrics: a run may resume across them
_RESUME_NEUTRAL = {
    "resume",
    "progress_bar",
    "num_workers",
    "log_every_n_steps",
    "max_time_minutes",
    "eval_batch_size",
}


@dataclass(frozen=True)
class TaskSpec:
    train_split: str
    val_split: str | None  # None: carved out of train (train.val_size)
    eval_split: str  # the split metrics.json reports
    data_files: tuple[str, ...]  # what the run depends on, for the resume fingerprint


TASKS: dict[str, TaskSpec] = {
    "agreement": TaskSpec(
        "train", "val", "test", ("train.parquet", "val.parquet", "test.parquet", "vocab.json")
    ),
    "sst2": TaskSpec("train", None, "dev", ("train.parquet", "dev.parquet")),
}


def build_model(task: str, model_cfg: Any, data_dir: str | Path) -> tuple[nn.Module, Any]:
    """A fresh (agreement) or pretrained (SST-2) classifier and the encoder for its inputs."""
    if task == "agreement":
        vocab = Vocab.load(Path(data_dir) / "vocab.json")
        config = AgreementConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, **asdict(model_cfg))
        return AgreementTransformer(config), WordEncoder(vocab, max_length=config.block_size)
    if task == "sst2":
        model = HFClassifier.from_pretrained(model_cfg.pretrained, num_labels=2)
        if model_cfg.freeze_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)
        return model, HFEncoder(load_pretrained_tokenizer(model_cfg.pretrained))
    raise ValueError(f"unknown task {task!r}; known: {sorted(TASKS)}")


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: torch.utils.data.DataLoader,
    *,
    device: torch.device | str = "cpu",
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, Any]:
    """Accuracy over ``loader``, overall and per attractor count (key ``"unknown"`` for -1)."""
    was_training = model.training
    model.eval().to(device)
    correct: dict[int, int] = {}
    total: dict[int, int] = {}
    for batch in tqdm(loader, desc=desc, disable=not progress, leave=False):
        logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).logits  # (B, C)
        hits = (logits.argmax(-1).cpu() == batch["labels"]).tolist()
        for k, hit in zip(batch["n_attractors"].tolist(), hits, strict=True):
            correct[k] = correct.get(k, 0) + int(hit)
            total[k] = total.get(k, 0) + 1
    model.train(was_training)
    n = sum(total.values())
    keys = sorted(total)
    name = {k: ("unknown" if k < 0 else str(k)) for k in keys}
    return {
        "accuracy": sum(correct.values()) / n if n else float("nan"),
        "n": n,
        "accuracy_by_attractors": {name[k]: correct[k] / total[k] for k in keys},
        "n_by_attractors": {name[k]: total[k] for k in keys},
    }


class _RunRecorder(Callback):
    """Learning curve and timing, kept in the checkpoint so a resumed run continues them."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.wall_s = 0.0  # fit wall time, all (resumed) runs together
        self.step_s = 0.0  # time inside training steps only (for samples/s)
        self.samples = 0
        self._wall_before = 0.0
        self._t_fit = self._t_step = 0.0
        self._loss_sum: torch.Tensor | float = 0.0
        self._loss_n = 0

    @property
    def state_key(self) -> str:
        return "attnflow.RunRecorder"

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "wall_s": self.wall_s, "step_s": self.step_s, "samples": self.samples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = [dict(r) for r in state["rows"]]
        self.wall_s, self.step_s, self.samples = state["wall_s"], state["step_s"], state["samples"]

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._wall_before, self._t_fit = self.wall_s, time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._t_step = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.step_s += time.perf_counter() - self._t_step
        n = len(batch["labels"])
        self.samples += n
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._loss_sum = self._loss_sum + loss.detach().float() * n
        self._loss_n += n

    def _update_wall(self) -> None:
        self.wall_s = self._wall_before + time.perf_counter() - self._t_fit

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        train_loss = float(self._loss_sum) / self._loss_n if self._loss_n else float("nan")
        self.rows.append(
            {
                "step": int(trainer.global_step),
                "epoch": int(trainer.current_epoch),
                "train_loss": train_loss,
                "val_loss": float(metrics.get("val_loss", float("nan"))),
                "val_acc": float(metrics.get("val_acc", float("nan"))),
            }
        )
        self._loss_sum, self._loss_n = 0.0, 0
        self._update_wall()  # before ModelCheckpoint (always last) saves this state

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._update_wall()


def _precision(train: TrainConfig) -> str:
    if train.precision != "auto":
        return train.precision
    on_gpu = train.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def _fingerprint(task: str, model_cfg: Any, train: TrainConfig, seed: int, data_dir: Path) -> str:
    h = hashlib.sha256()
    settings = {k: v for k, v in asdict(train).items() if k not in _RESUME_NEUTRAL}
    h.update(json.dumps([task, asdict(model_cfg), settings, seed], sort_keys=True, default=str).encode())
    for name in TASKS[task].data_files:
        path = data_dir / name
        h.update(name.encode())
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
    return h.hexdigest()[:16]


def _read_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated file, or not a checkpoint at all
        first = (str(exc).splitlines() or [""])[0]
        raise RuntimeError(
            f"cannot read checkpoint {path} ({type(exc).__name__}: {first}); delete it or set train.resume=false"
        ) from exc


def _resume_state(out_dir: Path, fingerprint: str, resume: bool) -> dict[str, Any] | None:
    """The checkpoint to resume from, or None (stale checkpoints are then removed)."""
    last = out_dir / "last.ckpt"
    if resume and last.is_file():
        ckpt = _read_checkpoint(last)
        if ckpt.get("attnflow", {}).get("fingerprint") == fingerprint:
            return ckpt
        warnings.warn(
            f"{last} was written by a different config, seed or data; starting afresh", stacklevel=3
        )
    for name in ("last.ckpt", "best.ckpt"):
        (out_dir / name).unlink(missing_ok=True)
    return None


def _load_weights(module: ClassifierModule, path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    state = _read_checkpoint(path).get("state_dict")
    if state is None:
        raise ValueError(f"{path}: no state_dict; not a Lightning checkpoint")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not match the model ({exc})") from None


def _write_curve(out_dir: Path, rows: list[dict[str, float]], title: str) -> None:
    with atomic_path(out_dir / "curve.csv") as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CURVE_COLUMNS)
        writer.writeheader()
        writer.writerows({k: r[k] for k in CURVE_COLUMNS} for r in rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    steps = [r["step"] for r in rows]
    ax_loss.plot(steps, [r["train_loss"] for r in rows], marker="o", label="train")
    ax_loss.plot(steps, [r["val_loss"] for r in rows], marker="o", label="val")
    ax_loss.set(xlabel="step", ylabel="cross-entropy", title=f"{title}: loss")
    ax_loss.legend()
    ax_acc.plot(steps, [r["val_acc"] for r in rows], marker="o", color="C2")
    ax_acc.set(xlabel="step", ylabel="accuracy", title=f"{title}: validation accuracy")
    fig.tight_layout()
    with atomic_path(out_dir / "curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _save_plain_checkpoints(module: ClassifierModule, out_dir: Path, fingerprint: str) -> None:
    """best/last.ckpt for a model used as loaded (no fit): its weights, marked finished."""
    ckpt = {"state_dict": module.state_dict(), "attnflow": {"fingerprint": fingerprint, "finished": True}}
    for name in ("best.ckpt", "last.ckpt"):
        with atomic_path(out_dir / name) as tmp:
            torch.save(ckpt, tmp)


def train_task(
    task: str,
    *,
    data_dir: str | Path,
    out_dir: str | Path,
    model_cfg: Any = None,
    train_cfg: Any = None,
    seed: int = 0,
    logger: Any = None,
    callbacks: list[Callback] | None = None,
) -> dict[str, Any]:
    """Train (or, for an already fine-tuned checkpoint, only evaluate) ``task``; return metrics.json.

    ``model_cfg`` / ``train_cfg``: mappings (or dataclasses) over the task's defaults in
    :mod:`attnflow.lit.config`. ``logger``: any Lightning logger (e.g. ``MLFlowLogger``) or None.
    ``callbacks``: extra Lightning callbacks. With ``resume`` and a matching ``out_dir/last.ckpt``,
    training continues from it (from the end of its epoch) and ends as an uninterrupted run would.
    Under DDP only rank 0 evaluates, writes and returns metrics; other ranks return ``{}``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {sorted(TASKS)}")
    spec = TASKS[task]
    mcfg = from_dict(MODEL_CONFIGS[task], model_cfg)
    tcfg = from_dict(TRAIN_CONFIGS[task], train_cfg)
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"prepared data folder not found: {data_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)

    pl.seed_everything(seed, workers=True, verbose=False)
    model, encoder = build_model(task, mcfg, data_dir)
    fingerprint = _fingerprint(task, mcfg, tcfg, seed, data_dir)
    module = ClassifierModule(
        model,
        lr=tcfg.lr,
        weight_decay=tcfg.weight_decay,
        warmup_ratio=tcfg.warmup_ratio,
        seed=seed,
        fingerprint=fingerprint,
    )
    dm = TextClassificationDataModule(
        data_dir,
        encoder,
        train_split=spec.train_split,
        val_split=spec.val_split or "val",
        eval_split=spec.eval_split,
        batch_size=tcfg.batch_size,
        eval_batch_size=tcfg.eval_batch_size,
        max_length=tcfg.max_length,
        train_subset=tcfg.train_subset,
        val_size=tcfg.val_size,
        length_bucketing=tcfg.length_bucketing,
        num_workers=tcfg.num_workers,
        seed=seed,
    )
    if spec.val_split is None and not tcfg.val_size:
        raise ValueError(f"task {task!r} has no validation split: set train.val_size")
    should_train = getattr(mcfg, "finetune", None)
    if should_train is None:
        should_train = not getattr(model, "finetuned", False)

    recorder = _RunRecorder()
    if logger is not None:
        logger.log_hyperparams(
            {
                "task": task,
                "seed": seed,
                **{f"model.{k}": v for k, v in asdict(mcfg).items()},
                **{f"train.{k}": v for k, v in asdict(tcfg).items()},
            }
        )
    trainer = pl.Trainer(
        accelerator=tcfg.accelerator,
        devices=tcfg.devices,
        strategy=tcfg.strategy,
        precision=_precision(tcfg),
        max_epochs=tcfg.max_epochs,
        max_time=timedelta(minutes=tcfg.max_time_minutes) if tcfg.max_time_minutes else None,
        deterministic=tcfg.deterministic,
        gradient_clip_val=tcfg.gradient_clip_val or None,
        logger=logger if logger is not None else False,
        callbacks=[
            recorder,
            EarlyStopping(monitor="val_acc", mode="max", patience=tcfg.patience),
            ModelCheckpoint(
                dirpath=out_dir,
                filename="best",
                monitor="val_acc",
                mode="max",
                save_top_k=1,
                enable_version_counter=False,
                auto_insert_metric_name=False,
            ),
            # its own callback: with save_last=True, Lightning 2.6 refreshes last.ckpt only when the
            # best one changes; with no monitor, top-1 is the latest epoch, overwritten each time
            ModelCheckpoint(dirpath=out_dir, filename="last", save_top_k=1, enable_version_counter=False),
            *(callbacks or []),
        ],
        enable_progress_bar=tcfg.progress_bar,
        enable_model_summary=tcfg.progress_bar,
        log_every_n_steps=tcfg.log_every_n_steps,
        default_root_dir=out_dir,
        num_sanity_val_steps=0,
    )

    dm.setup("fit" if should_train else "test")
    module.train()  # from_pretrained returns eval mode; Lightning keeps a submodule's mode as found
    if should_train:
        ckpt = _resume_state(out_dir, fingerprint, tcfg.resume)
        if ckpt is not None and ckpt["attnflow"].get("finished"):
            recorder.load_state_dict(ckpt["callbacks"][recorder.state_key])  # nothing left to train
        else:
            with warnings.catch_warnings():
                # out_dir also holds model/, metrics.json...: not a problem for ModelCheckpoint
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
                trainer.fit(
                    module,
                    datamodule=dm,
                    ckpt_path=out_dir / "last.ckpt" if ckpt else None,
                    weights_only=True,
                )
        if not trainer.is_global_zero:
            return {}
        _load_weights(module, out_dir / "best.ckpt")
    else:
        if not trainer.is_global_zero:
            return {}
        _save_plain_checkpoints(module, out_dir, fingerprint)

    device = trainer.strategy.root_device
    result = evaluate(
        module.model,
        dm.test_dataloader(),
        device=device,
        progress=tcfg.progress_bar,
        desc=f"{task} {spec.eval_split}",
    )
    module.model.cpu()
    save_classifier(module.model, encoder, out_dir / "model")

    rows = recorder.rows
    val_accs = [r["val_acc"] for r in rows]
    best = max(range(len(rows)), key=lambda i: (val_accs[i], -i)) if rows else None
    metrics: dict[str, Any] = {
        "task": task,
        "eval_split": spec.eval_split,
        "accuracy": result["accuracy"],
        "n_eval": result["n"],
    }
    if set(result["n_by_attractors"]) - {"unknown"}:
        metrics["accuracy_by_attractors"] = result["accuracy_by_attractors"]
        metrics["n_by_attractors"] = result["n_by_attractors"]
    metrics.update(
        {
            "val_accuracy": val_accs[best] if best is not None else None,
            "epochs": len(rows),
            "best_epoch": rows[best]["epoch"] if best is not None else None,
            "n_train": len(dm.train) if should_train else 0,
            "trained": bool(should_train),
            "train_wall_s": round(recorder.wall_s, 2),
            "train_samples_per_s": round(recorder.samples / recorder.step_s, 1) if recorder.step_s else None,
            "seed": seed,
        }
    )
    write_json(out_dir / "metrics.json", metrics)
    _write_curve(out_dir, rows, task)
    if logger is not None:
        _log_final(logger, metrics, out_dir, step=int(trainer.global_step))
    return metrics


def _log_final(logger: Any, metrics: dict[str, Any], out_dir: Path, *, step: int) -> None:
    flat = {f"{metrics['eval_split']}_acc": metrics["accuracy"]}
    flat.update(
        {
            f"{metrics['eval_split']}_acc_attractors_{k}": v
            for k, v in metrics.get("accuracy_by_attractors", {}).items()
        }
    )
    for key in ("train_wall_s", "train_samples_per_s", "epochs", "best_epoch", "val_accuracy"):
        value = metrics.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            flat[key] = float(value)
    logger.log_metrics(flat, step=step)
    experiment, run_id = getattr(logger, "experiment", None), getattr(logger, "run_id", None)
    if run_id is not None and hasattr(experiment, "log_artifact"):  # MLflow
        for name in ("metrics.json", "curve.csv", "curve.png"):
            experiment.log_artifact(run_id, str(out_dir / name))
