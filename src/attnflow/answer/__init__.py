"""Attribute a generated answer (a span of tokens) to its prompt, and score it as FlashTrace does.

`span_attribution` gives one weight per prompt token for every method (gradient methods on the
answer's summed logits, attention methods through `attnflow.generate`), `guided_deletion` its
RISE / MAS (`attnflow.answer.metrics`), `recovery_at` the share of known source tokens it ranks
first; `attnflow.answer.tasks` builds items with known sources offline, `attnflow.answer.chat`
puts them in a chat model's template and finds the answer in its generation, and
`attnflow.answer.compare` summarises several methods on the same items (the FlashTrace side of
such a comparison: `attnflow.compare.flashtrace`), and `attnflow.answer.study` runs and saves that
comparison in one call (the ``answer`` stage, `benchmarks/answer_side_by_side.py`).
"""

from .chat import TEMPLATE, answer_span, chat_prompt, user_gold_positions
from .compare import answer_target, bootstrap, item_scores, summarise
from .deletion import deletion_scores, guided_deletion
from .metrics import auc, deletion_areas, deletion_order, recovery_at
from .span import ATTENTION_METHODS, GRADIENT_METHODS, SPAN_METHODS, span_attribution
from .study import answer_tables, compare_tools, run_meta, save_answer_study, tool_weights
from .tasks import (
    TASKS,
    AnswerItem,
    arithmetic_items,
    build_items,
    gold_positions,
    multihop_items,
    retrieval_items,
)

__all__ = [
    "ATTENTION_METHODS",
    "GRADIENT_METHODS",
    "SPAN_METHODS",
    "TASKS",
    "TEMPLATE",
    "AnswerItem",
    "answer_span",
    "answer_tables",
    "answer_target",
    "arithmetic_items",
    "auc",
    "bootstrap",
    "build_items",
    "chat_prompt",
    "compare_tools",
    "deletion_areas",
    "deletion_order",
    "deletion_scores",
    "gold_positions",
    "guided_deletion",
    "item_scores",
    "multihop_items",
    "recovery_at",
    "retrieval_items",
    "run_meta",
    "save_answer_study",
    "span_attribution",
    "summarise",
    "tool_weights",
    "user_gold_positions",
]
