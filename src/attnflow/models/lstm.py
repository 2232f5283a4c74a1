"""An LSTM sequence classifier: the teacher of the agreement transformer (online distillation).

Abnar, Dehghani & Zuidema (2020), "Transferring Inductive Biases through Knowledge Distillation":
an LSTM's recurrent bias, distilled into a transformer while both train, makes the transformer
better at subject-verb agreement. The authors' teacher (Reflect ``small_lstm_v4``): 2 layers,
hidden and embedding size 256, input dropout 0.2, hidden dropout 0.8. It reads the prefix left to
right and classifies from the top layer's state at the last real token.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from attnflow.models.output import ClassifierOutput

__all__ = ["LSTMClassifier", "LSTMConfig"]


@dataclass
class LSTMConfig:
    vocab_size: int = 10_004  # set from the Vocab when building
    embedding_dim: int = 256  # the authors' teacher
    hidden_size: int = 256  # the authors' teacher
    num_layers: int = 2  # the authors' teacher
    input_dropout: float = 0.2  # on the word embeddings (authors)
    hidden_dropout: float = 0.8  # between LSTM layers and on the final state (authors: 0.8)
    n_classes: int = 2
    pad_id: int = 0


class LSTMClassifier(nn.Module):
    """Embedding -> dropout -> stacked LSTM -> dropout -> linear, on the last real position.

    >>> import torch
    >>> model = LSTMClassifier(LSTMConfig(vocab_size=10, embedding_dim=4, hidden_size=4))
    >>> model(torch.tensor([[2, 5, 6, 0]]), torch.tensor([[1, 1, 1, 0]])).logits.shape
    torch.Size([1, 2])
    """

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.pad_id)
        self.input_dropout = nn.Dropout(config.input_dropout)
        self.lstm = nn.LSTM(
            config.embedding_dim,
            config.hidden_size,
            num_layers=config.num_layers,
            batch_first=True,
            dropout=config.hidden_dropout if config.num_layers > 1 else 0.0,
        )
        self.hidden_dropout = nn.Dropout(config.hidden_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.n_classes)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> ClassifierOutput:
        mask = (input_ids != self.config.pad_id) if attention_mask is None else attention_mask.bool()
        x = self.input_dropout(self.embedding(input_ids))  # (B, T, E)
        lengths = mask.sum(dim=1).clamp(min=1).cpu()  # (B,)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)  # h: (layers, B, H); the state at each sample's last real token
        return ClassifierOutput(logits=self.classifier(self.hidden_dropout(h[-1])))
