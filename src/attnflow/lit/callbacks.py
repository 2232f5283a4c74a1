"""Lightning callbacks of the train stage: the learning curve and timing, progress in logs, and a
guard that stops training at the first non-finite loss or weight."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

__all__ = [
    "CURVE_COLUMNS",
    "EpochLog",
    "FiniteGuard",
    "NonFiniteError",
    "RunRecorder",
    "check_finite_weights",
]

CURVE_COLUMNS = ("step", "epoch", "train_loss", "val_loss", "val_acc")


class RunRecorder(Callback):
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
                **(
                    {"teacher_val_acc": float(metrics["teacher_val_acc"])}
                    if "teacher_val_acc" in metrics
                    else {}
                ),
            }
        )
        self._loss_sum, self._loss_n = 0.0, 0
        self._update_wall()  # before ModelCheckpoint (always last) saves this state

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._update_wall()

    @property
    def best(self) -> int | None:
        """Index of the row with the highest val_acc (the earliest on ties), None without rows."""
        rows = self.rows
        return max(range(len(rows)), key=lambda i: (rows[i]["val_acc"], -i)) if rows else None


class EpochLog(Callback):
    """Plain progress lines for logs (no terminal): one per epoch, and a heartbeat every
    ``heartbeat_s`` seconds inside long epochs, so a redirected run never looks hung."""

    def __init__(self, task: str, *, heartbeat_s: float = 60.0, stream: TextIO | None = None) -> None:
        self.task, self.heartbeat_s = task, heartbeat_s
        self.stream = stream or sys.stderr
        self._t0 = self._last = 0.0

    def _say(self, text: str) -> None:
        print(f"[train {self.task}] {text}", file=self.stream, flush=True)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0 = self._last = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if now - self._last >= self.heartbeat_s:
            self._last = now
            total = trainer.num_training_batches
            self._say(
                f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}: batch {batch_idx + 1}/{total}"
            )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        m = trainer.callback_metrics
        self._say(
            f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs} done in {time.perf_counter() - self._t0:.0f} s: "
            f"val_loss {float(m.get('val_loss', float('nan'))):.4f}, val_acc {float(m.get('val_acc', float('nan'))):.4f}"
        )


class NonFiniteError(RuntimeError):
    """Training produced a non-finite (NaN or infinite) loss or weight."""


_HINT = "lower the learning rate (task.<task>.train.lr) or set gradient_clip_val; nothing was exported"


def check_finite_weights(module: torch.nn.Module, where: str) -> None:
    """Raise :class:`NonFiniteError` naming the first parameter that holds a NaN or an infinity."""
    params = [(n, p) for n, p in module.named_parameters() if p.is_floating_point()]
    if not params:
        return
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in params])  # (P,): one sync below
    if bool(finite.all()):
        return
    name = params[int((~finite).nonzero()[0])][0]
    raise NonFiniteError(f"non-finite weight {name!r} {where}: {_HINT}")


class FiniteGuard(Callback):
    """Stop training with :class:`NonFiniteError` at the first non-finite training loss (checked
    after every step) or weight (checked before every validation, so no checkpoint holds one).

    It only reads the loss and the weights: the training math and the RNG stream are unchanged.
    Early stopping cannot catch this: ``val_acc`` of NaN weights is a finite number.
    """

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            raise NonFiniteError(
                f"non-finite training loss ({float(loss.detach().float().sum())}) at step "
                f"{trainer.global_step} (epoch {trainer.current_epoch + 1}, batch {batch_idx + 1}): {_HINT}"
            )

    def _weights(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        where = f"after step {trainer.global_step} (epoch {trainer.current_epoch + 1})"
        check_finite_weights(pl_module, where)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._weights(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._weights(trainer, pl_module)
