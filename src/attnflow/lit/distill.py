"""Online knowledge distillation: an LSTM teacher and the transformer student, trained together.

Abnar, Dehghani & Zuidema (2020), "Transferring Inductive Biases through Knowledge Distillation",
as the authors trained the paper's agreement model: each step the teacher learns from the gold
labels and the student from the teacher's current soft predictions (and, with ``rate < 1``, from
the gold labels too). The teacher's logits are detached in the student's loss, so each model's
gradient comes from its own loss only.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from attnflow.lit.module import ClassifierModule

__all__ = ["DistillationModule", "distillation_loss"]


def distillation_loss(
    student_logits: Tensor, teacher_logits: Tensor, labels: Tensor, *, rate: float, temperature: float
) -> Tensor:
    """rate · KL(softmax(t / T) ‖ softmax(s / T)) / T² + (1 − rate) · CE(s, y), batch mean.

    The authors' loss: cross-entropy of the student's tempered softmax against the teacher's soft
    targets, scaled by 1 / T² (Reflect ``distill_loss``); the KL differs from that cross-entropy by
    the teacher's entropy, a constant for the student, so the gradients are the same. Their
    variants: rate 0.9 at T = 1, and pure distillation, rate 1.0. ``rate = 0`` is plain training.

    >>> import torch
    >>> s, t, y = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([0])
    >>> round(float(distillation_loss(s, t, y, rate=0.0, temperature=1.0)), 4)  # CE = log(1 + e^-2)
    0.1269
    """
    if not 0.0 <= rate <= 1.0 or temperature <= 0:
        raise ValueError(f"need 0 <= rate <= 1 and temperature > 0, got {rate} and {temperature}")
    ce = F.cross_entropy(student_logits, labels)
    if rate == 0.0:
        return ce
    log_p_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    p_teacher = F.softmax(teacher_logits.detach().float() / temperature, dim=-1)
    kl = F.kl_div(log_p_student, p_teacher, reduction="batchmean")  # Σ p_t (log p_t − log p_s)
    return rate * kl / temperature**2 + (1.0 - rate) * ce


class DistillationModule(ClassifierModule):
    """:class:`ClassifierModule` whose model (the student) also learns from a teacher trained
    alongside it on the gold labels; one optimizer and schedule over both. ``val_acc`` is the
    student's (early stopping and the best checkpoint follow it); ``teacher_val_acc`` is logged."""

    def __init__(
        self, model: nn.Module, teacher: nn.Module, *, rate: float, temperature: float, **kwargs: Any
    ) -> None:
        super().__init__(model, **kwargs)
        self.teacher = teacher
        self.rate, self.temperature = rate, temperature

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        student = self(batch)  # (B, C)
        teacher = self.teacher(batch["input_ids"], batch["attention_mask"]).logits  # (B, C)
        student_loss = distillation_loss(
            student, teacher, batch["labels"], rate=self.rate, temperature=self.temperature
        )
        teacher_loss = F.cross_entropy(teacher, batch["labels"])
        n = len(batch["labels"])
        self.log("student_loss", student_loss, on_step=True, on_epoch=False, batch_size=n)
        self.log("teacher_loss", teacher_loss, on_step=True, on_epoch=False, batch_size=n)
        loss = student_loss + teacher_loss
        self.log("train_loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=n)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        logits = self.teacher(batch["input_ids"], batch["attention_mask"]).logits
        acc = (logits.argmax(-1) == batch["labels"]).float().mean()
        self.log("teacher_val_acc", acc, on_epoch=True, batch_size=len(batch["labels"]), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        return self._optimizers([*self.model.parameters(), *self.teacher.parameters()])
