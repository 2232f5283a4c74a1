"""Tiny float64 transformers for the AttnLRP tests: random BERT / GPT-2 / Llama, optionally bias-free,
and the lxt fixture models of /work/shared/fixtures/attnlrp (shared/fixtures/attnlrp in a checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

VOCAB = 50


def _fixture_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "fixtures" / "attnlrp"
        if candidate.is_dir():
            return candidate
    candidate = Path("/work/shared/fixtures/attnlrp")
    return candidate if candidate.is_dir() else None


FIXTURES = _fixture_root()


def tiny(name: str, *, zero_bias: bool = False, seed: int = 0) -> torch.nn.Module:
    """A random eager float64 model with 2 layers and hidden 16; zero_bias sets every bias to 0."""
    torch.manual_seed(seed)
    small = dict(vocab_size=VOCAB, initializer_range=0.2, attn_implementation="eager")
    if name == "bert":
        config = transformers.BertConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32, num_labels=3, **small,
        )  # fmt: skip
        model = transformers.BertForSequenceClassification(config)
    elif name in ("gpt2", "gpt2_cls"):
        config = transformers.GPT2Config(
            n_embd=16, n_layer=2, n_head=2, n_positions=32, num_labels=3, **small
        )
        cls = transformers.GPT2LMHeadModel if name == "gpt2" else transformers.GPT2ForSequenceClassification
        model = cls(config)
    elif name in ("llama", "llama_cls"):
        config = transformers.LlamaConfig(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=32, max_position_embeddings=32, num_labels=3, **small,
        )  # fmt: skip
        cls = (
            transformers.LlamaForCausalLM if name == "llama" else transformers.LlamaForSequenceClassification
        )
        model = cls(config)
    else:
        raise ValueError(name)
    model = model.double().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.zero_() if zero_bias else p.normal_(0.0, 0.1)
            elif "norm" in pname.lower() or "ln_" in pname:
                p.normal_(1.0, 0.1)  # gains away from 1, as the fixture models
    return model


IDS = torch.tensor([3, 17, 8, 41, 5, 22, 9])  # (T,) = 7 tokens
