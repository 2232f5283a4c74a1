"""Explanations at the scale of a real 7-8B model: time and memory of raw + rollout with attention
sinks handled, and of AttnLRP, on a random-weight model of Llama-3-8B's shape in bfloat16.

    python benchmarks/model_scale.py                                   # CUDA: Llama-3-8B shape, bf16
    python benchmarks/model_scale.py --lengths 8192,16384,32768 --methods rollout
    python benchmarks/model_scale.py --shape 1b --device cpu --lengths 128,256   # no GPU: 1B shape
    python benchmarks/model_scale.py --shape tiny --device cpu --lengths 64      # what the test runs

The weights are random (transformers' initialisation, seed 0): the time and memory of a forward
and a backward do not depend on the values, and no checkpoint has to be downloaded. Shapes:
"8b" = Llama-3-8B (32 layers, hidden 4,096, 32 query / 8 key-value heads, MLP 14,336, vocabulary
128,256), "1b" = Llama-3.2-1B (16 layers, hidden 2,048, 32 / 8 heads, MLP 8,192, tied embeddings),
"tiny" = 2 layers of width 64 (the test's).

Methods, each on the last token of one random sequence, one after the other in this process:

- rollout: raw attention and rollout with sinks handled ("diagonal"), as `explain_text` on a
  causal LM does it: one streamed forward adds up each head's sink scores
  (`attnflow.stream.stream_sink_scores`), `attnflow.explain.causal.sinks_from_scores` finds the
  sinks, a second streamed forward moves each head's sink attention to the diagonal before the
  head mean (`attnflow.stream.stream_maps`; no (L, H, T, T) is ever formed);
- attnlrp: `attnflow.attnlrp.attnlrp(..., attention="sdpa")`: one forward and one backward with
  torch's fused attention (no (H, T, T) probabilities kept), in the model's dtype on its device.

Reported per method and length: seconds (after a 16-token warm-up), the device's peak allocated
memory (CUDA, reset before each measurement) and the process's peak resident set (ru_maxrss, the
whole process so far); a length that runs out of memory is reported as such and the rest go on.
Writes benchmarks/results/model_scale.json (one run; --out to put it elsewhere) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "model_scale.json"
METHODS = ("rollout", "attnlrp")
# transformers LlamaConfig fields of each shape (the released configs' sizes; rope as Llama 3)
SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False),
}  # fmt: skip
DEFAULT_LENGTHS = {"cuda": (8192, 16384), "cpu": (128, 256)}


def build(shape: str, device: str, dtype, *, min_vocab: int = 0) -> object:
    """A random-weight LlamaForCausalLM of `shape` (SHAPES) on `device` in `dtype`, eval mode; the
    vocabulary at least ``min_vocab`` (a real tokenizer's ids on the tiny shape)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"--shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    sizes = {**SHAPES[shape], "vocab_size": max(SHAPES[shape]["vocab_size"], min_vocab)}
    config = LlamaConfig(
        **sizes, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
        attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters made in dtype: an 8B model never exists in float32
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def run(model, ids, method: str) -> dict:
    """One method on the last token of `ids` (1, T); returns what it computed (kept small)."""
    import torch

    if method == "rollout":
        from attnflow.explain.causal import sinks_from_scores
        from attnflow.stream import stream_maps, stream_sink_scores

        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        scores, seen, _ = stream_sink_scores(model, batch)
        sinks = sinks_from_scores(scores, seen)
        got = stream_maps(
            model, batch, [ids.shape[1] - 1], ("raw", "rollout"), sinks=sinks, sink_mode="diagonal"
        )
        return {"rollout": got["rollout"], "sink_keys": int(sinks[0].any(axis=(0, 1)).sum())}
    if method == "attnlrp":
        from attnflow.attnlrp import attnlrp

        return {"input_relevance": attnlrp(model, ids[0], attention="sdpa").input_relevance}
    raise ValueError(f"--methods: unknown {method!r}; the methods are {', '.join(METHODS)}")


def measure(model, method: str, tokens: int, device: str) -> dict:
    """Seconds and peak memory of one method at `tokens` tokens; out of memory is a result."""
    import torch

    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=gen).to(device)
    row = {"method": method, "tokens": tokens, "device": device}
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        got = run(model, ids, method)
        if device == "cuda":
            torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        row["out_of_memory"] = True
        return row
    row["seconds"] = time.perf_counter() - t0
    row["ru_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    if device == "cuda":
        row["device_peak_bytes"] = torch.cuda.max_memory_allocated()
    if "sink_keys" in got:
        row["sink_keys"] = got["sink_keys"]
    finite = all(bool(torch.isfinite(v).all()) for v in got.values() if torch.is_tensor(v))
    row["finite"] = finite
    return row


def table(rows: list[dict], meta: dict) -> str:
    """The run as a markdown table."""
    lines = [
        f"`python benchmarks/model_scale.py --shape {meta['shape']}`, random weights, {meta['dtype']}, "
        f"{meta['device_name']}, load average {' '.join(f'{x:.2f}' for x in meta['load_before'])}.",
        "",
        "| method | tokens | seconds | device peak | process peak |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r.get("out_of_memory"):
            lines.append(f"| {r['method']} | {r['tokens']:,} | out of memory | | |")
            continue
        dev = f"{r['device_peak_bytes'] / 2**30:.1f} GB" if "device_peak_bytes" in r else ""
        lines.append(
            f"| {r['method']} | {r['tokens']:,} | {r['seconds']:.1f} | {dev} | {r['ru_maxrss_bytes'] / 2**30:.2f} GB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default=None, help="8b (default on CUDA), 1b (default on the CPU) or tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--lengths", default=None, help="comma-separated token counts (default: by device)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    device = args.device
    shape = args.shape or ("8b" if device == "cuda" else "1b")
    lengths = (
        [int(n) for n in args.lengths.split(",")]
        if args.lengths
        else list(DEFAULT_LENGTHS.get(device, (128,)))
    )
    methods = args.methods.split(",")
    if unknown := sorted(set(methods) - set(METHODS)):
        ap.error(f"--methods: unknown {', '.join(unknown)}; the methods are {', '.join(METHODS)}")
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", str(torch.get_num_threads()))))
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} CPUs)"
    meta = {"shape": shape, "dtype": args.dtype, "device": device, "device_name": name,
            "load_before": os.getloadavg(), "torch": torch.__version__}  # fmt: skip
    model = build(shape, device, dtype)
    meta["parameters"] = sum(p.numel() for p in model.parameters())
    rows = []
    for method in methods:
        measure(model, method, 16, device)  # warm-up: kernels and libraries loaded
        for tokens in lengths:
            rows.append(measure(model, method, tokens, device))
            print(json.dumps(rows[-1]), flush=True)
    meta["load_after"] = os.getloadavg()
    result = {"meta": meta, "rows": rows}
    from attnflow.io import write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)  # atomically; NaN as null
    print(table(rows, meta))
    return result


if __name__ == "__main__":
    main()
