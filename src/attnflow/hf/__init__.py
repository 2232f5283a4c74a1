"""Explain any Hugging Face model: attention capture that survives SDPA, and one-call explanations.

Transformers 5 runs attention through SDPA by default, and SDPA never forms the attention
probabilities: ``output_attentions=True`` then returns an *empty* tuple with only a log warning.
Here a model is switched to eager attention for the forward that needs it and switched back
afterwards (`eager_attention`), and empty or missing attentions raise `AttentionUnavailableError`
instead of passing silently. Eager attentions are nodes of the autograd graph, so the gradient of
a score with respect to every attention probability comes from the same forward
(`forward_attentions(..., target=...)`).

Axis order of every attention tensor: [batch, layer, head, query, key]. Padding (the batch's
``attention_mask``) is exactly 0 in every row and column.

`explain_text` / `explain_image` run a model once and apply the explainers of
`attnflow.methods.EXPLAINERS` ("raw", "rollout", "flow", ...), returning an `Explanation`:
the display tokens and, per method, a map [layer, key] for the explained query row.

>>> merge_words(["[CLS]", "un", "##believ", "##able", "!"], [0.1, 0.2, 0.3, 0.1, 0.3])[0]
['[CLS]', 'unbelievable', '!']
"""

from __future__ import annotations

from attnflow._extras import require_modules, requires_extra

with requires_extra("attnflow.hf (explaining Hugging Face models)"):
    import torch  # noqa: F401  (the extra's check)

    require_modules("attnflow.hf (explaining Hugging Face models)", "transformers")  # found, not imported

from attnflow.bridge.eager import AttentionUnavailableError, NoOutputHeadError, eager_attention
from attnflow.bridge.hf import AttentionOutput, Target, forward_attentions
from attnflow.models.unsafe import UnsafeCheckpointError

from .causal_options import SinkWarning
from .explanation import (
    MAX_LOGITS_IN_DICT,
    Explanation,
    Explanations,
    explanations_frame,
    load_explanations,
    save_explanations,
)
from .loading import TOKENIZER_FILES, UNK_SHARE_MAX, check_vocabulary, load_model, max_input_tokens
from .methods import INPUT_PROVIDERS, MODEL_METHODS, InputContext
from .rows import is_causal_model
from .text import explain_batch, explain_image, explain_text, explain_texts
from .words import (
    WORD_START_MARKERS,
    WORDPIECE_CONTINUATION,
    merge_scores,
    merge_words,
    token_labels,
    word_groups,
)

__all__ = [
    "INPUT_PROVIDERS",
    "MAX_LOGITS_IN_DICT",
    "MODEL_METHODS",
    "TOKENIZER_FILES",
    "UNK_SHARE_MAX",
    "WORDPIECE_CONTINUATION",
    "WORD_START_MARKERS",
    "AttentionOutput",
    "AttentionUnavailableError",
    "Explanation",
    "Explanations",
    "InputContext",
    "NoOutputHeadError",
    "SinkWarning",
    "Target",
    "UnsafeCheckpointError",
    "check_vocabulary",
    "eager_attention",
    "explain_batch",
    "explain_image",
    "explain_text",
    "explain_texts",
    "explanations_frame",
    "forward_attentions",
    "is_causal_model",
    "load_explanations",
    "load_model",
    "max_input_tokens",
    "merge_scores",
    "merge_words",
    "save_explanations",
    "token_labels",
    "word_groups",
]
