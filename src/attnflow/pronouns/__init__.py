"""attnflow.pronouns: the paper's Figure 4 (which antecedent of a masked pronoun raw attention,
rollout and flow point to in BERT) as an analogue on a causal LM, with AttnLRP and integrated
gradients beside them.

- ``sentences``: templated minimal pairs of sentences with two antecedents of different gender
  (swapped in the twin, at the same token positions) and a known referent, ending right before
  the pronoun (pure Python: the templates are data).
- ``causal``: the causal reference: blank each antecedent in turn and see which one the model's
  preferred pronoun loses more of its logit margin without.
- ``study``: one run of the model per sentence through `attnflow.hf` / `attnflow.attnlrp` /
  captum, the attention maps plain and corrected (sinks, receptive field), the pronoun logits,
  and per method the share of sentences whose referent (the model's choice, the causal choice,
  the first-mentioned antecedent) outranks the other (`attnflow.metrics.antecedents`), with
  bootstrap intervals.

torch and transformers are reached only through attnflow.hf and attnflow.compare, or inside the functions.
"""

from .causal import (
    CAUSAL_COLUMNS,
    CAUSAL_VALUE,
    blank_spans,
    blank_token_id,
    causal_reference,
    margin_effects,
)
from .sentences import FAMILIES, ORDERS, PRONOUNS, Family, PronounItem, pronoun_sentences, token_span
from .study import (
    CHANCE,
    CORRECTION,
    IG,
    LAYERED,
    MEASURES,
    PRONOUN_METHODS,
    VARIANTS,
    PronounStudy,
    map_key,
    pronoun_id,
    pronoun_study,
    pronoun_tables,
    save_pronoun_study,
)

__all__ = [
    "CAUSAL_COLUMNS",
    "CAUSAL_VALUE",
    "CHANCE",
    "CORRECTION",
    "FAMILIES",
    "IG",
    "LAYERED",
    "MEASURES",
    "ORDERS",
    "PRONOUNS",
    "PRONOUN_METHODS",
    "VARIANTS",
    "Family",
    "PronounItem",
    "PronounStudy",
    "blank_spans",
    "blank_token_id",
    "causal_reference",
    "map_key",
    "margin_effects",
    "pronoun_id",
    "pronoun_sentences",
    "pronoun_study",
    "pronoun_tables",
    "save_pronoun_study",
    "token_span",
]
