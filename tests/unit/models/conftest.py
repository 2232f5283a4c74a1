"""Tiny models for the model tests: a 2-layer agreement transformer and a random 2-layer BERT."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnflow.data.vocab import Vocab
from attnflow.models import AgreementConfig, AgreementTransformer
from tests._tiny import make_tiny_bert

WORDS = ["the", "dog", "dogs", "cat", "cats", "near", "of", "big"]


@pytest.fixture
def vocab() -> Vocab:
    return Vocab.build([WORDS])


@pytest.fixture
def tiny_agreement(vocab: Vocab) -> AgreementTransformer:
    torch.manual_seed(0)
    config = AgreementConfig(
        vocab_size=len(vocab),
        block_size=16,
        n_layer=2,
        n_head=2,
        n_embd=16,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
    )
    return AgreementTransformer(config).eval()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))
