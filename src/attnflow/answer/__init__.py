"""Attribute a generated answer (a span of tokens) to its prompt, and score it as FlashTrace does.

`span_attribution` gives one weight per prompt token for every method (gradient methods on the
answer's summed logits, attention methods through `attnflow.generate`), `guided_deletion` its
RISE / MAS (`attnflow.answer.metrics`), `recovery_at` the share of known source tokens it ranks
first; `attnflow.answer.tasks` builds items with known sources offline.
"""

from .deletion import deletion_scores, guided_deletion
from .metrics import auc, deletion_areas, deletion_order, recovery_at
from .span import ATTENTION_METHODS, GRADIENT_METHODS, SPAN_METHODS, span_attribution
from .tasks import AnswerItem, arithmetic_items, gold_positions, multihop_items, retrieval_items

__all__ = [
    "ATTENTION_METHODS",
    "GRADIENT_METHODS",
    "SPAN_METHODS",
    "AnswerItem",
    "arithmetic_items",
    "auc",
    "deletion_areas",
    "deletion_order",
    "deletion_scores",
    "gold_positions",
    "guided_deletion",
    "multihop_items",
    "recovery_at",
    "retrieval_items",
    "span_attribution",
]
