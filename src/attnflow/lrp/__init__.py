"""attnflow.lrp: layer-wise relevance propagation through transformer classifiers (Chefer et al. 2021).

The rules of "Transformer Interpretability Beyond Attention Visualization" (Chefer, Gur & Wolf,
CVPR 2021) as their public code applies them, one module per rule family (``linear``: αβ,
``residual``: the normalised Add, ``matmul``: the attention products), and a relevance-aware
forward per architecture (``agreement``; ``encoders``: BERT family and DistilBERT) that reuses a loaded model's
weights; each family is a data row (``FAMILIES``, ``LRPFamily``) and ``register_lrp_family`` adds one.
``lrp_relevance`` dispatches on the model and returns R(A) and ∂logit/∂A per layer,
(batch, layer, head, query, key), for ``attnflow.explain``'s "chefer_lrp" and "chefer" methods.
"""

from ._result import LRPResult
from ._safe import STABILIZER, safe_divide
from .api import FAMILIES, SUPPORTED, LRPFamily, lrp_relevance, register_lrp_family
from .linear import linear_relevance
from .matmul import attention_relevance, matmul_relevance
from .residual import add_relevance

__all__ = [
    "FAMILIES",
    "STABILIZER",
    "SUPPORTED",
    "LRPFamily",
    "LRPResult",
    "add_relevance",
    "attention_relevance",
    "linear_relevance",
    "lrp_relevance",
    "matmul_relevance",
    "register_lrp_family",
    "safe_divide",
]
