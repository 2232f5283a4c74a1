"""Tiny models for the model tests: a 2-layer agreement transformer and a random 2-layer BERT."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnflow.data.vocab import Vocab
from attnflow.models import AgreementConfig, AgreementTransformer

WORDS = ["the", "dog", "dogs", "cat", "cats", "near", "of", "big"]
BERT_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "very", "not", "a"]


@pytest.fixture
def vocab() -> Vocab:
    return Vocab.build([WORDS])


@pytest.fixture
def tiny_agreement(vocab: Vocab) -> AgreementTransformer:
    torch.manual_seed(0)
    config = AgreementConfig(
        vocab_size=len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0
    )
    return AgreementTransformer(config).eval()


def make_tiny_bert(directory: Path, *, with_tokenizer: bool = True) -> Path:
    """A random BertForSequenceClassification (2 layers, 2 heads, width 16) saved to ``directory``."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(BERT_WORDS),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=2,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    if with_tokenizer:
        BertTokenizer(vocab={w: i for i, w in enumerate(BERT_WORDS)}).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))
