"""attnflow.compare: attnflow's methods in the evaluation tools researchers already use.

- `token_attributions` (``scores``): one method (any of `attnflow.methods`: attention, model-level
  such as DecompX or value zeroing, AttnLRP) as a (batch, token) score of token ids; the core of
  both adapters.
- `faithfulness_table` (``faithfulness``): AOPC comprehensiveness and sufficiency of any methods and
  the gradient comparators on a Hugging Face classifier, with bootstrap intervals and the seconds
  per text each took.
- ``attnflow.compare.captum``: `AttnflowAttribution`, a captum ``Attribution`` for captum's
  metrics (infidelity, sensitivity_max) next to Saliency / IG / FeatureAblation; and
  `integrated_gradients`, IG × input per token through captum's ``LayerIntegratedGradients``.
- ``attnflow.compare.ferret``: `AttnflowExplainer`, a ferret ``BaseExplainer`` for ferret's
  ``Benchmark`` (AOPC comprehensiveness / sufficiency, τ-LOO).
- ``attnflow.compare.flashtrace``: FlashTrace's weights of a generated span on the token ids of
  `attnflow.answer` (``benchmarks/answer_side_by_side.py``).
- `infidelity_masking`, `sensitivity_masking` (``perturb``): token-masking perturbations for
  captum's metrics on token ids.

captum and ferret are optional: ``pip install "attnflow[compare]"`` (ferret-xai 0.4.1 to 0.4.x).
Importing this package needs neither; see docs/methods/compare.md.
"""

from .faithfulness import faithfulness_table
from .perturb import infidelity_masking, mask_tokens, sensitivity_masking
from .scores import METHODS, logits_forward, token_attributions

__all__ = [
    "METHODS",
    "faithfulness_table",
    "infidelity_masking",
    "logits_forward",
    "mask_tokens",
    "sensitivity_masking",
    "token_attributions",
]
