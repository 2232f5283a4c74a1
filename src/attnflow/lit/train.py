"""Train one task's classifier and write its fixed outputs: the entry point of the ``train`` stage.

``train_task`` writes into ``out_dir``: ``best.ckpt`` and ``last.ckpt`` (Lightning checkpoints,
for resume), ``model/`` (pickle-free export, see :func:`attnflow.models.load_classifier`),
``metrics.json``, ``curve.csv`` (``step, epoch, train_loss, val_loss, val_acc``; one row per
validation) and ``curve.png``. Every file is written atomically. Resume rules:
:mod:`attnflow.lit.checkpoints`.

Repeatable by construction: the same config, seed and data give the same bytes in every file of
``out_dir`` on any machine of the same kind, whatever its load. Training runs on
``trainer.num_threads`` torch threads (CPU kernels split their sums by thread, so the count changes
the floats); a finished run's checkpoints keep no wall-clock time and no absolute path; the times go
to ``timing_path`` (outside ``out_dir``) instead. See docs/determinism.md.
"""

from __future__ import annotations

import csv
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import MISSING as MISSING_FIELD
from dataclasses import asdict, fields, is_dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint
from torch import nn
from tqdm.auto import tqdm

from attnflow.io import atomic_path, write_json
from attnflow.lit import checkpoints
from attnflow.lit.callbacks import CURVE_COLUMNS, EpochLog, FiniteGuard, RunRecorder, check_finite_weights
from attnflow.lit.data import TextClassificationDataModule
from attnflow.lit.distill import DistillationModule
from attnflow.lit.module import ClassifierModule
from attnflow.models import save_classifier
from attnflow.schema import MISSING, TrainConfig, TrainerConfig
from attnflow.tasks import TaskSpec, get_task

__all__ = [
    "canonical_checkpoint",
    "cpu_identity",
    "evaluate",
    "settings",
    "timing",
    "torch_threads",
    "train_task",
]

# keys that change neither the trained weights nor the metrics: a run may resume across them
_RESUME_NEUTRAL = {
    "resume",
    "progress_bar",
    "num_workers",
    "log_every_n_steps",
    "max_time_minutes",
    "eval_batch_size",
    "device",
}

C = TypeVar("C")


def settings(cls: type[C], values: Mapping[str, Any] | C, what: str) -> C:
    """``cls`` filled from ``values``; an unknown or missing key raises ValueError naming it.

    >>> settings(TrainerConfig, {"accelerator": "cpu"}, "trainer")
    Traceback (most recent call last):
    ValueError: trainer: missing keys ['deterministic', 'device', 'devices', 'log_every_n_steps', 'num_threads', 'num_workers', 'precision', 'progress_bar', 'strategy']
    """
    if is_dataclass(values) and not isinstance(values, type):
        values = asdict(values)
    values = dict(values)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if unknown := sorted(set(values) - names):
        raise ValueError(f"{what}: unknown keys {unknown}; known: {sorted(names)}")
    for f in fields(cls):  # type: ignore[arg-type]
        default = f.default_factory() if f.default_factory is not MISSING_FIELD else None  # type: ignore[misc]
        if is_dataclass(default) and isinstance(values.get(f.name), Mapping):  # a nested block
            values[f.name] = settings(type(default), values[f.name], f"{what}.{f.name}")
    filled = cls(**values)
    if missing := sorted(n for n in names if getattr(filled, n) == MISSING):
        raise ValueError(f"{what}: missing keys {missing}")
    return filled


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


def _precision(trainer: TrainerConfig) -> str:
    if trainer.precision != "auto":
        return trainer.precision
    on_gpu = trainer.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def _trainer(
    train: TrainConfig, hw: TrainerConfig, out_dir: Path, task: str, logger: Any, extra: list
) -> pl.Trainer:
    bars = hw.progress_bar and sys.stderr.isatty()  # a bar in a log file is invisible: log lines instead
    return pl.Trainer(
        accelerator=hw.accelerator,
        devices=hw.devices,
        strategy=hw.strategy,
        precision=_precision(hw),
        max_epochs=train.max_epochs,
        max_time=timedelta(minutes=train.max_time_minutes) if train.max_time_minutes else None,
        deterministic=hw.deterministic,
        gradient_clip_val=train.gradient_clip_val or None,
        logger=logger if logger is not None else False,
        callbacks=[
            *extra,
            FiniteGuard(),  # before the checkpoints: a NaN loss or weight stops the run, nothing saved
            EarlyStopping(monitor="val_acc", mode="max", patience=train.patience),
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
            *([] if bars else [EpochLog(task)]),
        ],
        enable_progress_bar=bars,
        enable_model_summary=hw.progress_bar,
        log_every_n_steps=hw.log_every_n_steps,
        default_root_dir=out_dir,
        num_sanity_val_steps=0,
    )


def _fit(
    trainer: pl.Trainer, module: ClassifierModule, dm: Any, out_dir: Path, resume: bool, fp: str
) -> None:
    checkpoints.recover(out_dir)
    cont, why = checkpoints.resume_decision(out_dir, fp, resume)
    print(f"[train] {why}", file=sys.stderr, flush=True)  # the log says which happened and why
    with warnings.catch_warnings():
        # out_dir also holds model/, metrics.json...: not a problem for ModelCheckpoint
        warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        if cont:
            trainer.fit(module, datamodule=dm, ckpt_path=out_dir / "last.ckpt", weights_only=True)
        else:
            with checkpoints.kept_aside(out_dir):
                trainer.fit(module, datamodule=dm, weights_only=True)


def _load_weights(module: ClassifierModule, path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    state = checkpoints.read_checkpoint(path).get("state_dict")
    if state is None:
        raise ValueError(f"{path}: no state_dict; not a Lightning checkpoint")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not match the model ({exc})") from None


def _save_plain_checkpoints(module: ClassifierModule, out_dir: Path, fp: str) -> None:
    """best/last.ckpt for a model used as loaded (no fit): its weights, marked finished."""
    ckpt = {"state_dict": module.state_dict(), "attnflow": {"fingerprint": fp, "finished": True}}
    for name in checkpoints.CHECKPOINTS:
        checkpoints.write_checkpoint(out_dir / name, ckpt)


def _write_curve(out_dir: Path, rows: list[dict[str, float]], title: str) -> None:
    columns = [*CURVE_COLUMNS, *(["teacher_val_acc"] if rows and "teacher_val_acc" in rows[0] else [])]
    with atomic_path(out_dir / "curve.csv") as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: r[k] for k in columns} for r in rows)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.5))
    ax_loss, ax_acc = fig.subplots(1, 2)
    steps = [r["step"] for r in rows]
    ax_loss.plot(steps, [r["train_loss"] for r in rows], marker="o", label="train")
    ax_loss.plot(steps, [r["val_loss"] for r in rows], marker="o", label="val")
    ax_loss.set(xlabel="step", ylabel="cross-entropy", title=f"{title}: loss")
    ax_loss.legend()
    ax_acc.plot(
        steps,
        [r["val_acc"] for r in rows],
        marker="o",
        color="C2",
        label="student" if "teacher_val_acc" in columns else None,
    )
    if "teacher_val_acc" in columns:
        ax_acc.plot(steps, [r["teacher_val_acc"] for r in rows], marker="s", color="C3", label="teacher")
        ax_acc.legend()
    ax_acc.set(xlabel="step", ylabel="accuracy", title=f"{title}: validation accuracy")
    fig.tight_layout()
    with atomic_path(out_dir / "curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)


def _by_attractors(result: dict) -> dict[str, Any]:
    """Accuracy, n and accuracy per attractor count of one evaluated split."""
    keep = ("accuracy", "n", "accuracy_by_attractors", "n_by_attractors")
    return {k: result[k] for k in keep}


def _teacher_metrics(module: Any, dm: Any, recorder: RunRecorder, device: Any) -> dict[str, Any]:
    """The teacher's accuracy on the eval split, and its validation accuracy at the student's best epoch."""
    best = recorder.best
    out: dict[str, Any] = {
        "accuracy": evaluate(module.teacher, dm.test_dataloader(), device=device)["accuracy"]
    }
    if best is not None and "teacher_val_acc" in recorder.rows[best]:
        out["val_accuracy"] = recorder.rows[best]["teacher_val_acc"]
    return out


def _metrics(
    spec: TaskSpec, result: dict, recorder: RunRecorder, n_train: int, trained: bool, seed: int
) -> dict:
    rows, best = recorder.rows, recorder.best
    metrics: dict[str, Any] = {
        "task": spec.name,
        "eval_split": spec.eval_split,
        "accuracy": result["accuracy"],
        "n_eval": result["n"],
    }
    if set(result["n_by_attractors"]) - {"unknown"}:
        metrics["accuracy_by_attractors"] = result["accuracy_by_attractors"]
        metrics["n_by_attractors"] = result["n_by_attractors"]
    metrics.update(
        {
            "val_accuracy": rows[best]["val_acc"] if best is not None else None,
            "epochs": len(rows),
            "best_epoch": rows[best]["epoch"] if best is not None else None,
            "n_train": n_train,
            "trained": trained,
            "seed": seed,
            "cpu": cpu_identity(),
        }
    )
    return metrics


def timing(recorder: RunRecorder) -> dict[str, Any]:
    """The run's wall-clock figures: fit time (resumed runs together) and training samples per second.

    Kept apart from ``metrics.json``: a time differs on every run, the metrics must not."""
    samples_per_s = round(recorder.samples / recorder.step_s, 1) if recorder.step_s else None
    return {"train_wall_s": round(recorder.wall_s, 2), "train_samples_per_s": samples_per_s}


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block on ``n`` torch intra-op threads, then restore the count found.

    The count is part of the result on the CPU: matrix products and reductions split their sums
    into one chunk per thread, so 1 and 2 threads round differently (gradients differ by ~1e-8 after
    one step, the loss in the 3rd digit after one epoch of the agreement model).
    """
    if n < 1:
        raise ValueError(f"trainer.num_threads must be >= 1, got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cpu_identity() -> dict[str, Any]:
    """What the trained floats depend on besides config, seed and data, on the CPU: torch's version,
    the vector instructions its kernels dispatch to (``AVX512``, ``AVX2``, ...; MKL and oneDNN
    dispatch likewise) and the thread count. Two runs that agree here and in their config give the
    same bytes; a different instruction set gives other floats (docs/determinism.md)."""
    return {
        "torch": torch.__version__.split("+")[0],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


_RUN_DEPENDENT = ("wall_s", "step_s")  # RunRecorder state that measures the machine, not the run
_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")  # files in out_dir


def canonical_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A finished run's checkpoint without what differs between two identical runs: the recorder's
    wall-clock times (zeroed) and the checkpoint callbacks' absolute paths (their folder ``.``, the
    files by name).

    Only for checkpoints nothing resumes from (a finished run retrains from scratch)."""
    out = dict(ckpt)
    callbacks = {}
    for key, state in ckpt.get("callbacks", {}).items():
        state = dict(state)
        if key == RunRecorder().state_key:
            state.update({k: 0.0 for k in _RUN_DEPENDENT if k in state})
        if isinstance(state.get("dirpath"), str):
            state["dirpath"] = "."
        for k in _PATH_KEYS:
            if isinstance(state.get(k), str) and state[k]:
                state[k] = Path(state[k]).name
        if isinstance(state.get("best_k_models"), dict):
            state["best_k_models"] = {Path(k).name: v for k, v in state["best_k_models"].items()}
        callbacks[key] = state
    if callbacks:
        out["callbacks"] = callbacks
    return out


def _canonicalise_checkpoints(out_dir: Path) -> None:
    """Rewrite best/last.ckpt as :func:`canonical_checkpoint`s."""
    for name in checkpoints.CHECKPOINTS:
        path = out_dir / name
        if path.is_file():
            checkpoints.write_checkpoint(path, canonical_checkpoint(checkpoints.read_checkpoint(path)))


def train_task(
    task: str | TaskSpec,
    *,
    data_dir: str | Path,
    out_dir: str | Path,
    model_cfg: Mapping[str, Any],
    train_cfg: Mapping[str, Any] | TrainConfig,
    trainer_cfg: Mapping[str, Any] | TrainerConfig,
    seed: int = 0,
    logger: Any = None,
    callbacks: list[Callback] | None = None,
    timing_path: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or, for an already fine-tuned checkpoint, only evaluate) ``task``; return metrics.json.

    ``model_cfg`` / ``train_cfg`` / ``trainer_cfg``: the ``task.<name>.model`` / ``.train`` and
    ``trainer`` config blocks (every key given; an unknown or missing one raises before anything is
    touched). ``logger``: any Lightning logger (e.g. ``MLFlowLogger``) for the per-step metrics, or
    None. ``callbacks``: extra Lightning callbacks. ``timing_path``: where the wall-clock figures
    (:func:`timing`) go, a JSON file outside ``out_dir`` (None: not written). Under DDP only rank 0
    evaluates, writes and returns metrics; other ranks return ``{}``.
    """
    hw = settings(TrainerConfig, trainer_cfg, "trainer")
    with torch_threads(hw.num_threads):
        return _train_task(
            task, data_dir, out_dir, model_cfg, train_cfg, hw, seed, logger, callbacks, timing_path
        )


def _train_task(
    task: str | TaskSpec,
    data_dir: str | Path,
    out_dir: str | Path,
    model_cfg: Mapping[str, Any],
    train_cfg: Mapping[str, Any] | TrainConfig,
    hw: TrainerConfig,
    seed: int,
    logger: Any,
    callbacks: list[Callback] | None,
    timing_path: str | Path | None,
) -> dict[str, Any]:
    spec = get_task(task) if isinstance(task, str) else task
    mcfg = settings(spec.model_config, model_cfg, f"task.{spec.name}.model")
    tcfg = settings(TrainConfig, train_cfg, f"task.{spec.name}.train")
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"prepared data folder not found: {data_dir}")
    if spec.val_split is None and not tcfg.val_size:
        raise ValueError(f"task {spec.name!r} has no validation split: set task.{spec.name}.train.val_size")
    out_dir.mkdir(parents=True, exist_ok=True)

    pl.seed_everything(seed, workers=True, verbose=False)
    model, encoder = spec.build_model(mcfg, data_dir)
    neutral = {k: v for k, v in {**asdict(tcfg), **asdict(hw)}.items() if k not in _RESUME_NEUTRAL}
    fp = checkpoints.fingerprint(
        spec.name, {"model": asdict(mcfg), **neutral}, seed, data_dir, spec.data_files
    )
    optim = dict(
        lr=tcfg.lr, weight_decay=tcfg.weight_decay, warmup_ratio=tcfg.warmup_ratio, seed=seed, fingerprint=fp
    )
    if tcfg.teacher == "none":
        module: ClassifierModule = ClassifierModule(model, **optim)
    elif spec.build_teacher is None:
        raise ValueError(f"task {spec.name!r} has no teacher model: set task.{spec.name}.train.teacher=none")
    else:
        teacher = spec.build_teacher(mcfg, data_dir)
        module = DistillationModule(
            model, teacher, rate=tcfg.distill_rate, temperature=tcfg.distill_temperature, **optim
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
        num_workers=hw.num_workers,
        seed=seed,
    )
    should_train = getattr(mcfg, "finetune", None)
    if should_train is None:
        should_train = not getattr(model, "finetuned", False)

    recorder = RunRecorder()
    trainer = _trainer(tcfg, hw, out_dir, spec.name, logger, [recorder, *(callbacks or [])])
    dm.setup("fit" if should_train else "test")
    module.train()  # from_pretrained returns eval mode; Lightning keeps a submodule's mode as found
    if should_train:
        _fit(trainer, module, dm, out_dir, tcfg.resume, fp)
        if not trainer.is_global_zero:
            return {}
        _load_weights(module, out_dir / "best.ckpt")
        check_finite_weights(module, f"in {out_dir / 'best.ckpt'}")  # never export NaN weights
        _canonicalise_checkpoints(out_dir)
    else:
        if not trainer.is_global_zero:
            return {}
        _save_plain_checkpoints(module, out_dir, fp)

    device = trainer.strategy.root_device
    result = evaluate(module.model, dm.test_dataloader(), device=device)
    metrics = _metrics(spec, result, recorder, len(dm.train) if should_train else 0, bool(should_train), seed)
    for split in spec.extra_eval_splits:  # evaluation-only sets, e.g. the attractor items
        extra = evaluate(module.model, dm.split_dataloader(split), device=device)
        metrics.setdefault("extra_eval", {})[split] = _by_attractors(extra)
    if isinstance(module, DistillationModule):
        metrics["teacher"] = _teacher_metrics(module, dm, recorder, device)
    module.cpu()
    save_classifier(module.model, encoder, out_dir / "model")
    write_json(out_dir / "metrics.json", metrics)
    _write_curve(out_dir, recorder.rows, spec.name)
    times = timing(recorder)
    if timing_path is not None:
        write_json(Path(timing_path), times)
    if logger is not None:
        _log_final(logger, {**metrics, **times}, step=int(trainer.global_step))
    return metrics


def _log_final(logger: Any, metrics: dict[str, Any], *, step: int) -> None:
    """The final accuracy and timing as metrics (the stage logs the files as artifacts once)."""
    split = metrics["eval_split"]
    flat = {f"{split}_acc": metrics["accuracy"]}
    flat.update(
        {f"{split}_acc_attractors_{k}": v for k, v in metrics.get("accuracy_by_attractors", {}).items()}
    )
    for key in ("train_wall_s", "train_samples_per_s", "epochs", "best_epoch", "val_accuracy"):
        value = metrics.get(key)
        if isinstance(value, int | float) and value == value:
            flat[key] = float(value)
    for split, extra in metrics.get("extra_eval", {}).items():
        flat[f"{split}_acc"] = extra["accuracy"]
        flat.update({f"{split}_acc_attractors_{k}": v for k, v in extra["accuracy_by_attractors"].items()})
    if "teacher" in metrics:
        flat[f"teacher_{metrics['eval_split']}_acc"] = metrics["teacher"]["accuracy"]
    logger.log_metrics(flat, step=step)
