"""A tiny random BERT classifier (tests/_tiny.py) whose weights are scaled up for the compare tests.

With BERT's default initialisation (std 0.02) a random 2-layer model attends almost uniformly and
its logits move by ~1e-6 when a token is masked: every faithfulness metric is then ~0 for every
method. Weights of std 0.3 make the attention peaked and the logit gaps of order 0.1-1.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnflow.hf import load_model
from tests._tiny import make_tiny_bert

# Standard deviation of the rescaled matrices (embeddings, projections, classifier).
WEIGHT_STD = 0.3
TEXTS = ["a very good movie", "not bad", "the movie is not very good"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, object]:
    """(model in eval mode, tokenizer); float32, default (SDPA) attention."""
    model, tokenizer = load_model(str(make_tiny_bert(tmp_path_factory.mktemp("bert"))))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=generator) * WEIGHT_STD)
    return model, tokenizer


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(TEXTS)


@pytest.fixture(scope="module")
def batch(bert: tuple[torch.nn.Module, object]) -> dict[str, torch.Tensor]:
    """TEXTS tokenized with right padding (sample 1 is padded)."""
    _, tokenizer = bert
    return dict(tokenizer(TEXTS, return_tensors="pt", padding=True))
