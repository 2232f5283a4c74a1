"""attnflow.attnlrp: AttnLRP (Achtibat et al., ICML 2024) for Hugging Face transformers.

Attention-aware LRP computed as gradient x input with a modified backward, in one forward and
one backward pass (as the authors' ``lxt`` "efficient" implementation): ``rules`` holds the
rules as autograd functions, ``patch`` applies them to one model instance inside a ``with``
block, ``attnlrp`` runs the pass and returns an ``AttnLRPResult``. See docs/methods/attnlrp.md.
"""

from .api import AttnLRPResult, attnlrp, attnlrp_batch
from .patch import ARCHITECTURES, SUPPORTED, Architecture, attnlrp_rules, register_architecture
from .rules import epsilon_rule, identity_rule, layer_norm_identity, rms_norm_identity, scale_gradient

__all__ = [
    "ARCHITECTURES",
    "SUPPORTED",
    "Architecture",
    "AttnLRPResult",
    "attnlrp",
    "attnlrp_batch",
    "attnlrp_rules",
    "epsilon_rule",
    "identity_rule",
    "layer_norm_identity",
    "register_architecture",
    "rms_norm_identity",
    "scale_gradient",
]
