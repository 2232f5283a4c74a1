"""LightningModule for any attnflow classifier: cross-entropy, AdamW, linear warm-up then decay.

The module receives the ``nn.Module`` (composition); it knows nothing of the architecture.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ClassifierModule", "warmup_linear_decay"]


def warmup_linear_decay(step: int, *, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier: ``(step+1)/warmup`` during warm-up, then linear to 0 at ``total_steps``.

    >>> [round(warmup_linear_decay(s, warmup_steps=2, total_steps=6), 2) for s in range(7)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


class ClassifierModule(pl.LightningModule):
    """Trains ``model`` (anything with the attnflow classifier interface) on labelled batches.

    Dropout randomness is re-seeded from ``(seed, global_step, rank)`` before every step, so a
    run resumed from a checkpoint draws the same masks as an uninterrupted one.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        lr: float,
        weight_decay: float,
        warmup_ratio: float,
        seed: int = 0,
        fingerprint: str = "",
    ) -> None:
        super().__init__()
        self.model = model
        self.lr, self.weight_decay, self.warmup_ratio = lr, weight_decay, warmup_ratio
        self.seed = seed
        self.fingerprint = fingerprint

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"]).logits  # (B, C)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        step = self.global_step * self.trainer.world_size + self.global_rank
        torch.manual_seed((self.seed * 1_000_003 + step) % 2**63)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch), batch["labels"])
        self.log(
            "train_loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=len(batch["labels"])
        )
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch)
        n = len(batch["labels"])
        loss = F.cross_entropy(logits.float(), batch["labels"])
        acc = (logits.argmax(-1) == batch["labels"]).float().mean()
        self.log("val_loss", loss, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)
        self.log("val_acc", acc, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        return self._optimizers(list(self.model.parameters()))

    def _optimizers(self, parameters: list[torch.nn.Parameter]) -> dict[str, Any]:
        """AdamW with warm-up then linear decay over every step of the run."""
        # decay matrices only (nanoGPT): biases and LayerNorm gains stay undecayed
        params = [p for p in parameters if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": self.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        # fused AdamW: one kernel for all parameters, ~4x faster steps on CPU than the per-tensor loop.
        # Not on a GPU: there Lightning's mixed precision (bf16-mixed, trainer.precision=auto) clips the
        # gradients itself and refuses an optimizer that unscales them inside its step, as fused does
        fused = all(p.is_floating_point() and p.device.type == "cpu" for p in params)
        optimizer = torch.optim.AdamW(groups, lr=self.lr, fused=fused)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = max(1, round(self.warmup_ratio * total))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: warmup_linear_decay(s, warmup_steps=warmup, total_steps=total)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # "finished": early stopping (which runs before checkpointing) or the epoch budget ended
        # the run, so a re-run must not train further.
        trainer = self.trainer
        finished = bool(trainer.should_stop) or self.current_epoch + 1 >= (trainer.max_epochs or 0) > 0
        checkpoint["attnflow"] = {"fingerprint": self.fingerprint, "finished": finished}
