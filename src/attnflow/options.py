"""The library's options as plain constants: the allowed strings of every switch, and the ranges of
numbers. One place each: the library modules, the config schema (:mod:`attnflow.schema`) and the
CLI import them from here, nobody restates them.

Light on purpose (standard library only, imports nothing of attnflow), so that validating a config
or building a CLI parser loads neither torch nor the flow solver, and so that any layer may import
it (it sits at the bottom of the import order).

>>> UNIT.check(0.5), UNIT.rule
(True, 'must lie in [0, 1]')
>>> "diagonal" in SINK_CHOICES and "auto" in SINK_CHOICES
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANSWER_TASKS",
    "ANSWER_TOOLS",
    "ANTECEDENT_REDUCTIONS",
    "ATTRIBUTION_METHODS",
    "AT_LEAST_0",
    "AT_LEAST_1",
    "BLANK_POSITIONS",
    "BLANK_SCORES",
    "BLANK_TARGETS",
    "BLANK_TOKENS",
    "CAPTURE_DTYPES",
    "CAPTURE_SELECTIONS",
    "CLS_SELF",
    "CLS_SELF_CHOICES",
    "DATA_SOURCES",
    "DROPOUT",
    "GENERATION_OVER",
    "GRADIENT_REDUCTIONS",
    "GRADIENT_TARGETS",
    "HEAD_AGGREGATIONS",
    "HF_ROW_CHOICES",
    "MISSING",
    "POSITIVE",
    "PRONOUN_METHODS",
    "RECEPTIVE_FIELDS",
    "REMOVALS",
    "ROW_CHOICES",
    "SINK_CHOICES",
    "SINK_MODES",
    "SINK_SCOPES",
    "SPAN_ATTENTION_METHODS",
    "SPAN_GRADIENT_METHODS",
    "SPEARMAN_METHODS",
    "TEACHERS",
    "UNDEFINED",
    "UNIT",
    "Range",
    "at_least",
    "nonempty",
    "ranged",
]

# A mandatory config value: "???" (OmegaConf's MISSING) fails at start when the YAML leaves it out.
MISSING: Any = "???"


# --------------------------------------------------------------------------------------------------
# Ranges of numbers (attached to a config field with `ranged`)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    """The allowed values of one config field: ``check(value)`` holds for them, ``rule`` says it in words."""

    check: Callable[[Any], bool]
    rule: str


def at_least(n: int, why: str = "") -> Range:
    return Range(lambda x: x >= n, f"must be >= {n}{why}")


AT_LEAST_0 = at_least(0)
AT_LEAST_1 = at_least(1)
POSITIVE = Range(lambda x: x > 0, "must be > 0")
UNIT = Range(lambda x: 0 <= x <= 1, "must lie in [0, 1]")
DROPOUT = Range(lambda x: 0 <= x < 1, "must lie in [0, 1)")


def nonempty(rule: str) -> Range:
    return Range(lambda x: len(x) > 0, rule)


def ranged(
    allowed: Range, default: Any = MISSING, *, factory: Callable[[], Any] | None = None, each: bool = False
) -> Any:
    """A dataclass field whose value (each element with `each`) must satisfy `allowed`; None passes
    (an optional field left unset)."""
    metadata = {"range": allowed, "each": each}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# --------------------------------------------------------------------------------------------------
# Choices (each tuple is the library's own: the module that implements the switch imports it)
# --------------------------------------------------------------------------------------------------

# attnflow.explain: how a layer's heads are combined (explain._common)
HEAD_AGGREGATIONS = ("mean", "sum", "max")
# which query row of a map explains the input, for the study's task setting (explain.rows)
ROW_CHOICES = ("cls", "max", "mean")
# the API's / CLI's row choice on any Hugging Face model (besides a token index; attnflow.hf)
HF_ROW_CHOICES = ("auto", "cls", "last", "max", "mean")
# Chefer's rules: the CLS-to-CLS entry of the maps (explain.relevance) ...
CLS_SELF = ("keep", "min", "zero")
# ... and the study's setting, which adds "authors" (each rule as its authors' code does it)
CLS_SELF_CHOICES = ("authors", *CLS_SELF)
# attention sinks of causal attention (explain.causal): how they are handled ...
SINK_MODES = ("none", "drop", "diagonal")
# ... what a caller may pass: a mode, or "auto" = the recommended mode (explain.causal.AUTO_SINK_MODE)
SINK_CHOICES = ("auto", *SINK_MODES)
SINK_SCOPES = ("position", "head")
# the receptive-field bias of causal attention (explain.receptive_field)
RECEPTIVE_FIELDS = ("none", "column", "uniform")
# generation: which columns a generated token's map shows (attnflow.generate)
GENERATION_OVER = ("prompt", "all")
# the pronoun test (attnflow.pronouns): its methods, and how an antecedent of several
# tokens is scored (attnflow.metrics.antecedents): the max or the sum over its tokens, or the max
# of their absolute values (for signed maps: influence either way)
PRONOUN_METHODS = ("raw", "rollout", "flow", "attnlrp", "integrated_gradients")
ANTECEDENT_REDUCTIONS = ("max", "sum", "max_abs")
# answer attribution (attnflow.answer, the `answer` stage): the tasks whose source tokens are known,
# the span methods (gradient ones, attention ones) and the tools compared (those and FlashTrace)
ANSWER_TASKS = ("arithmetic", "multihop", "retrieval")
SPAN_GRADIENT_METHODS = ("input_gradients", "integrated_gradients", "attnlrp")
SPAN_ATTENTION_METHODS = ("raw", "rollout", "flow", "chefer")
ANSWER_TOOLS = (*SPAN_GRADIENT_METHODS, *SPAN_ATTENTION_METHODS, "flashtrace")

# the capture stage (attnflow.capture)
CAPTURE_DTYPES = ("float16", "float32")
CAPTURE_SELECTIONS = ("first", "random")
# the importance scores (attnflow.attribution)
ATTRIBUTION_METHODS = ("blank_out", "input_gradients")
BLANK_POSITIONS = ("all", "skip_cls")
BLANK_TOKENS = ("pad", "unk", "mask")
BLANK_TARGETS = ("predicted", "gold")
BLANK_SCORES = ("prob", "logit")
GRADIENT_TARGETS = ("p0_minus_p1", "prob", "logit")
GRADIENT_REDUCTIONS = ("abs_sum", "l2", "grad_x_input")
# faithfulness: how a removed token is removed (attnflow.attribution.faithfulness)
REMOVALS = ("delete", "pad", "unk", "mask")
# correlations (attnflow.metrics)
SPEARMAN_METHODS = ("average", "dense_noties")
UNDEFINED = ("zero", "nan")
# training and data
TEACHERS = ("none", "lstm")
DATA_SOURCES = ("natural", "pooled")
