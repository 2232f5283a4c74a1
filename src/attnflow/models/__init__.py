"""Model definitions (plain ``nn.Module``) with one interface, and their pickle-free export.

Every classifier takes ``(input_ids, attention_mask, *, inputs_embeds, output_attentions)`` and
returns a :class:`ClassifierOutput`; attentions are ``(batch, layer, head, query, key)``.
"""

from attnflow.models.agreement import AgreementConfig, AgreementTransformer
from attnflow.models.encoders import HFEncoder, WordEncoder
from attnflow.models.hf import MINILM, HFClassifier, load_pretrained_tokenizer, resolve_pretrained
from attnflow.models.io import load_classifier, save_classifier
from attnflow.models.lstm import LSTMClassifier, LSTMConfig
from attnflow.models.output import ClassifierOutput

__all__ = [
    "MINILM",
    "AgreementConfig",
    "AgreementTransformer",
    "ClassifierOutput",
    "HFClassifier",
    "HFEncoder",
    "LSTMClassifier",
    "LSTMConfig",
    "WordEncoder",
    "load_classifier",
    "load_pretrained_tokenizer",
    "resolve_pretrained",
    "save_classifier",
]
