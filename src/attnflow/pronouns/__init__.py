"""attnflow.pronouns: the paper's Figure 4 (which antecedent of a masked pronoun raw attention,
rollout and flow point to in BERT) as an analogue on a causal LM, with AttnLRP and integrated
gradients beside them.

- ``sentences``: templated sentences with two antecedents of different gender and a known
  referent, ending right before the pronoun (pure Python: the templates are data).
- ``study``: one run of the model per sentence through `attnflow.hf` / `attnflow.attnlrp` /
  captum, the pronoun logits, and per method the share of sentences whose referent outranks the
  distractor (`attnflow.metrics.antecedents`), with bootstrap intervals.

torch and transformers are reached only through attnflow.hf and attnflow.compare, inside the functions.
"""

from .sentences import FAMILIES, PRONOUNS, Family, PronounItem, pronoun_sentences, token_span
from .study import (
    IG,
    LAYERED,
    MEASURES,
    PRONOUN_METHODS,
    PronounStudy,
    pronoun_id,
    pronoun_study,
    pronoun_tables,
    save_pronoun_study,
)

__all__ = [
    "FAMILIES",
    "IG",
    "LAYERED",
    "MEASURES",
    "PRONOUNS",
    "PRONOUN_METHODS",
    "Family",
    "PronounItem",
    "PronounStudy",
    "pronoun_id",
    "pronoun_sentences",
    "pronoun_study",
    "pronoun_tables",
    "save_pronoun_study",
    "token_span",
]
