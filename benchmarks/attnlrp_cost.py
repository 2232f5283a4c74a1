"""AttnLRP cost: attnflow.attnlrp vs one plain forward + backward (gradient of the logit).

    python benchmarks/attnlrp_cost.py            # both models, 30 interleaved repeats each
    python benchmarks/attnlrp_cost.py --repeats 5

Also a batch: 16 right-padded sentences of 8-40 tokens through the MiniLM-size BERT, one
``attnlrp_batch`` call (one forward, one backward) vs one batched gradient of the 16 predicted
logits (what the faithfulness table's cost column divides by).

Models: the lxt fixture BERT (shared/fixtures/attnlrp/bert: 4 layers, hidden 32, float64, the
fixture's 12-token input) and a MiniLM-size BERT (BertConfig: 6 layers, 12 heads, hidden 384,
intermediate 1536, vocab 30522, as all-MiniLM-L6-v2) with random weights, float32 and float64,
one sequence of 128 tokens, torch on 1 thread (--threads). Both sides run on the same model object, interleaved, after one
warm-up call each; the table gives the median wall time (CPU) and the
ratio. Writes benchmarks/results/attnlrp_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnflow.attnlrp import attnlrp, attnlrp_batch  # noqa: E402

FIXTURE = Path("/work/shared/fixtures/attnlrp/bert")


def plain_gradient(model: torch.nn.Module, ids: torch.Tensor, target: int) -> torch.Tensor:
    """∂logit/∂inputs_embeds: one forward, one backward, no rules."""
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids[None])
    embeds.requires_grad_(True)
    logit = model(inputs_embeds=embeds).logits[0, target]
    (grad,) = torch.autograd.grad(logit, embeds)
    return grad


def batched_gradient(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """∂(Σ_b predicted logit_b)/∂inputs_embeds of a padded batch: one forward, one backward."""
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
    embeds.requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=mask).logits
    (grad,) = torch.autograd.grad(logits.max(-1).values.sum(), embeds)
    return grad


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def measure(
    label: str, model: torch.nn.Module, ids: torch.Tensor, repeats: int, mask: torch.Tensor | None = None
) -> dict:
    model.eval()
    if mask is None:  # one sequence
        runs = {
            "attnlrp": lambda: attnlrp(model, ids, target=0),
            "gradient": lambda: plain_gradient(model, ids, 0),
        }
    else:  # a padded batch, each sample's predicted class
        runs = {
            "attnlrp": lambda: attnlrp_batch(model, ids, mask),
            "gradient": lambda: batched_gradient(model, ids, mask),
        }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(repeats):
        for key, fn in runs.items():
            times[key] += timed(fn, 1)
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {
        "model": label,
        "tokens": ids.shape[-1],
        "batch": 1 if mask is None else ids.shape[0],
        "attnlrp_ms": 1e3 * med["attnlrp"],
        "gradient_ms": 1e3 * med["gradient"],
        "ratio": med["attnlrp"] / med["gradient"],
    }
    print(f"{label:34s} T={ids.shape[-1]:4d}  attnlrp {row['attnlrp_ms']:8.2f} ms  "
          f"gradient {row['gradient_ms']:8.2f} ms  ratio {row['ratio']:.2f}")  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    fixture = transformers.BertForSequenceClassification.from_pretrained(
        FIXTURE, dtype=torch.float64, attn_implementation="eager"
    )
    case = json.loads((FIXTURE / "reference.json").read_text())["cases"][-1]
    rows.append(measure("lxt fixture BERT (float64)", fixture, torch.tensor(case["input_ids"]), args.repeats))
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    ids = torch.randint(1000, 30000, (128,))
    for dtype in (torch.float32, torch.float64):
        minilm = transformers.BertForSequenceClassification(config).to(dtype)
        rows.append(measure(f"MiniLM-size BERT ({str(dtype)[6:]})", minilm, ids, args.repeats))
    lengths = torch.randint(8, 41, (16,)).sort(descending=True).values
    batch = torch.zeros(16, int(lengths[0]), dtype=torch.long)
    mask = torch.zeros_like(batch)
    for b, n in enumerate(lengths.tolist()):
        batch[b, :n], mask[b, :n] = torch.randint(1000, 30000, (n,)), 1
    minilm = transformers.BertForSequenceClassification(config)
    rows.append(measure("MiniLM-size BERT, batch of 16 (float32)", minilm, batch, args.repeats, mask=mask))
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
    }
    out = ROOT / "benchmarks" / "results" / "attnlrp_cost.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    tmp.replace(out)


if __name__ == "__main__":
    main()
