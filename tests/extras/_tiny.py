"""A tiny random BERT classifier saved like a Hugging Face checkpoint, for the extras' examples
(self-contained: the examples run from the installed wheel, without tests/ on the path)."""

from __future__ import annotations

from pathlib import Path

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "very", "not", "a"]
TEXT = "a very good movie"


def tiny_bert(directory: Path) -> Path:
    """A random BertForSequenceClassification (2 layers, 2 heads, width 16) and its tokenizer."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=2)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(directory)
    BertTokenizer(vocab={w: i for i, w in enumerate(WORDS)}).save_pretrained(directory)
    return directory
