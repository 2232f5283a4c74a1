"""Tiny models shared by the tests (a random 2-layer BERT saved like a Hugging Face checkpoint, a
random 2-layer agreement encoder with its word encoder) and the letter tokenizer of the generation tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT_WORDS = [*SPECIAL, "good", "bad", "movie", "the", "very", "not", "a"]
AGREEMENT_WORDS = ["the", "dog", "dogs", "near", "cat", "cats", "big"]


def tiny_agreement(n_embd: int, words: Sequence[str] = AGREEMENT_WORDS, *, seed: int = 0):
    """(model, encoder): a random 2-layer, 2-head agreement encoder (eval mode, float32 as the
    study's, initialised under ``torch.manual_seed(seed)``) and its word encoder (``<eos>`` appended)."""
    from attnflow.data.vocab import Vocab
    from attnflow.models.agreement import AgreementConfig, AgreementTransformer
    from attnflow.models.encoders import WordEncoder

    torch.manual_seed(seed)
    vocab = Vocab.build([list(words)])
    encoder = WordEncoder(vocab, append_eos=True)
    config = AgreementConfig(vocab_size=len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=n_embd)
    return AgreementTransformer(config).eval(), encoder


def make_tiny_bert(
    directory: Path, *, words: Sequence[str] = BERT_WORDS, with_tokenizer: bool = True
) -> Path:
    """A random BertForSequenceClassification (2 layers, 2 heads, width 16) saved to ``directory``."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    words = list(dict.fromkeys([*SPECIAL, *words]))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=2,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    if with_tokenizer:
        BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(directory)
    return directory


class LetterTokenizer:
    """One token per lower-case letter ("a" = 0): enough tokenizer for explain_generation."""

    all_special_ids = ()

    def __call__(self, text, return_tensors=None):
        return {"input_ids": torch.tensor([[ord(c) - 97 for c in text]])}

    def convert_ids_to_tokens(self, ids):
        return [chr(97 + int(i)) for i in ids]

    def decode(self, ids):
        return "".join(chr(97 + int(i)) for i in ids)
