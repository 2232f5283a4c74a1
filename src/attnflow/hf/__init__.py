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
`attnflow.explain.EXPLAINERS` ("raw", "rollout", "flow", ...), returning an `Explanation`:
the display tokens and, per method, a map [layer, key] for the explained query row.

>>> merge_words(["[CLS]", "un", "##believ", "##able", "!"], [0.1, 0.2, 0.3, 0.1, 0.3])[0]
['[CLS]', 'unbelievable', '!']
"""

from __future__ import annotations

from attnflow._extras import require_modules, requires_extra

with requires_extra("attnflow.hf (explaining Hugging Face models)"):
    import torch  # noqa: F401  (the extra's check)

    require_modules("attnflow.hf (explaining Hugging Face models)", "transformers")  # found, not imported

from attnflow.models.unsafe import UnsafeCheckpointError

from .eager import AttentionUnavailableError, NoOutputHeadError, eager_attention
from .explanation import Explanation, load_explanations, save_explanations
from .forward import AttentionOutput, forward_attentions
from .loading import check_vocabulary, load_model, max_input_tokens
from .methods import INPUT_PROVIDERS, InputContext
from .text import explain_image, explain_text, explain_texts
from .words import merge_scores, merge_words, token_labels, word_groups

# Names other modules, tests and the method registry ("attnflow.hf:_attnlrp") read from attnflow.hf.
from .eager import _attention_configs as _attention_configs  # isort: skip
from .explanation import MAX_LOGITS_IN_DICT as MAX_LOGITS_IN_DICT  # isort: skip
from .forward import Target as Target  # isort: skip
from .forward import _model_device as _model_device  # isort: skip
from .loading import TOKENIZER_FILES as TOKENIZER_FILES  # isort: skip
from .loading import UNK_SHARE_MAX as UNK_SHARE_MAX  # isort: skip
from .loading import _tokenize as _tokenize  # isort: skip
from .methods import MODEL_METHODS as MODEL_METHODS  # isort: skip
from .methods import _attnlrp as _attnlrp  # isort: skip
from .methods import _method_specs as _method_specs  # isort: skip
from .rows import _check_layer as _check_layer  # isort: skip
from .rows import _is_causal as _is_causal  # isort: skip
from .rows import _row_position as _row_position  # isort: skip
from .rows import _scored_positions as _scored_positions  # isort: skip
from .text import _explain_batch as _explain_batch  # isort: skip
from .words import WORD_START_MARKERS as WORD_START_MARKERS  # isort: skip
from .words import WORDPIECE_CONTINUATION as WORDPIECE_CONTINUATION  # isort: skip

__all__ = [
    "INPUT_PROVIDERS",
    "AttentionOutput",
    "AttentionUnavailableError",
    "Explanation",
    "InputContext",
    "NoOutputHeadError",
    "UnsafeCheckpointError",
    "check_vocabulary",
    "eager_attention",
    "explain_image",
    "explain_text",
    "explain_texts",
    "forward_attentions",
    "load_explanations",
    "load_model",
    "max_input_tokens",
    "merge_scores",
    "merge_words",
    "save_explanations",
    "token_labels",
    "word_groups",
]
