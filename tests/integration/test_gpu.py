"""GPU smoke test: capture and one training step on CUDA (the study's code path), where CUDA exists.

Marked ``gpu`` (not in the default tier); on a machine without CUDA it skips and says so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]


def test_capture_and_a_training_step_run_on_cuda_and_match_the_cpu():
    import pytorch_lightning as pl

    from attnflow.capture import capture
    from attnflow.data.vocab import Vocab
    from attnflow.lit.module import ClassifierModule
    from attnflow.models import AgreementConfig, AgreementTransformer, WordEncoder

    texts = ["the dogs near the car", "the cat", "the keys to the cabinet"]
    encoder = WordEncoder(Vocab.build([t.split() for t in texts]))
    torch.manual_seed(0)
    model = AgreementTransformer(
        AgreementConfig(vocab_size=len(encoder.vocab), n_layer=2, n_head=2, n_embd=16)
    )
    cpu = capture(model, encoder, texts, progress=False)
    gpu = capture(model.cuda(), encoder, texts, device="cuda", progress=False)
    for a, b in zip(cpu.attentions, gpu.attentions, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)  # (L, H, T_i, T_i)

    batch = encoder.encode(texts)
    data = [{"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
             "labels": torch.tensor([1, 0, 1])}]  # fmt: skip
    module = ClassifierModule(model, lr=1e-3, weight_decay=0.0, warmup_ratio=0.0)
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False)  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    assert any(
        not torch.equal(b, p.detach().cpu().to(b.device))
        for b, p in zip(before, model.parameters(), strict=False)
    )
