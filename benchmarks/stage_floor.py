"""The least time this machine needs for the study's model arithmetic, against the 5-minute goal.

    python benchmarks/stage_floor.py       # ~10 s: reads the last run's outputs, times float32 products

Issue 36 asks for the non-training stages of `dvc repro` in <= 300 s on 2 cores, Tables 1-3
unchanged to 1e-6. Three workloads of those stages are matrix products through a model, and
their count of floating-point operations is fixed by what the study computes, whatever the code:

1. blank-out of the configured run (`attribute@sst2`; Tables 1-3 read it): one forward of every
   SST-2 sentence with each token blanked but [SEP] (and CLS under `skip_cls`), lengths from
   outputs/attribute/sst2/importance.safetensors, the encoder's shape from models/sst2/model;
2. blank-out under the two switches that need a model pass (`attribute@sst2`, the sensitivity
   table), on the `attribution.switch_samples` sentences of outputs/attribute/sst2/switches.safetensors;
3. integrated gradients of the Figure-4 analogue (`pronouns`): `pronouns.ig_steps` points per
   sentence, each a forward and a backward to the inputs (no weight gradients), lengths from
   outputs/explain/pronouns/maps.safetensors, the LM's shape from models/lm; the output layer at
   the explained position only, as the stage forms it.

Each count equals what `torch.utils.flop_counter.FlopCounterMode` counts on a model of that family
(tests/unit/test_stage_floor.py). Only the products are counted (norms, softmax, activations,
padding and the flow solver are left out), so each figure is a lower bound of its work. Each is
divided by the float32 product rate this machine reaches at that workload's main shape
(torch.matmul on torch's threads, the best of REPEATS after a warm-up, the best of ROUNDS
interleaved rounds) and by the best rate of any shape measured (the floor for any batching of the
same products), and printed beside the stage times of the last `dvc repro` (reports/stage_times.csv).
Writes benchmarks/results/stage_floor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from safetensors.numpy import load_file

from attnflow.attribution.samples import BLANK_POSITIONS
from attnflow.io import write_json
from attnflow.report.stage_times import read_table, totals

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "stage_floor.json"
GOAL_S = 300.0  # issue 36: the non-training stages of `dvc repro`, 2 cores
END_MARKERS = 1  # MiniLM's [SEP]: never blanked (attnflow.models.encoders: end_positions)
REPEATS = 5  # timed products per shape and round
ROUNDS = 4  # rounds over the shapes, interleaved; each shape's best round counts (a shared machine)


def encoder_forward_flops(tokens: int, hidden: int, intermediate: int, layers: int) -> int:
    """Products of one BERT-style encoder forward of `tokens` tokens (T, h, f, L):

        L * (2 T (4 h^2 + 2 h f) + 4 T^2 h)

    q, k, v and output projections (4 h^2 per token), the two feed-forward products (2 h f), and
    the scores q k^T and their use on v (2 T^2 h); 2 operations per multiply-add.

    >>> encoder_forward_flops(2, 1, 1, 1)  # 2*2*(4 + 2) + 4*4*1
    40
    """
    t, h, f = tokens, hidden, intermediate
    return layers * (2 * t * (4 * h * h + 2 * h * f) + 4 * t * t * h)


def llama_forward_flops(tokens: int, cfg: dict, *, output_rows: int = 1) -> int:
    """Products of one Llama-style decoder forward (grouped keys and values, gated feed-forward):

        L * (2 T (2 h q + 2 h kv + 3 h f) + 4 T^2 q) + 2 R h V

    with q = heads x head_dim, kv = key-value heads x head_dim, and the output layer (V words) at R
    positions (`output_rows`; the stage forms it at the explained position only). The causal mask
    is not credited (the scores are counted whole).

    >>> cfg = dict(hidden_size=2, intermediate_size=1, num_hidden_layers=1, num_attention_heads=1,
    ...            num_key_value_heads=1, head_dim=2, vocab_size=3)
    >>> llama_forward_flops(1, cfg)  # 2*(2*2*2 + 2*2*2 + 3*2*1) + 4*1*2 + 2*1*2*3
    64
    """
    h, f, n_layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q, kv = _llama_widths(cfg)
    t = tokens
    per_layer = 2 * t * (2 * h * q + 2 * h * kv + 3 * h * f) + 4 * t * t * q
    return n_layers * per_layer + 2 * output_rows * h * cfg["vocab_size"]


def llama_input_gradient_flops(tokens: int, cfg: dict) -> int:
    """Products of a forward and a backward to the inputs (no weight gradients), as one point of
    integrated gradients costs: every product of the forward once more for its input's gradient,
    and the two attention products (q k^T, p v) once more still, as both their operands depend on
    the input:

        2 F + L * 4 T^2 q          (F = `llama_forward_flops`)

    >>> cfg = dict(hidden_size=2, intermediate_size=1, num_hidden_layers=1, num_attention_heads=1,
    ...            num_key_value_heads=1, head_dim=2, vocab_size=3)
    >>> llama_input_gradient_flops(1, cfg)  # 2*64 + 4*1*2
    136
    """
    q, _ = _llama_widths(cfg)
    return 2 * llama_forward_flops(tokens, cfg) + cfg["num_hidden_layers"] * 4 * tokens * tokens * q


def _llama_widths(cfg: dict) -> tuple[int, int]:
    """(q, kv): the widths of the queries and of the keys (values) of a Llama config."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim


def ragged_lengths(path: Path, name: str) -> np.ndarray:
    """The last axis of each sample's array `name` in a ragged safetensors file (the token count)."""
    tensors = load_file(str(_needed(path)))
    if f"{name}.shapes" not in tensors:
        raise SystemExit(f"{path}: no array {name!r} (keys: {', '.join(sorted(tensors))})")
    return tensors[f"{name}.shapes"][:, -1].astype(np.int64)


def _needed(path: Path) -> Path:
    """`path`, or exit with one line saying which stage output is missing and how to make it."""
    if not path.is_file():
        raise SystemExit(
            f"{path} is missing: run the study first (`dvc repro`, or `dvc checkout` from its cache)"
        )
    return path


def product_rate(m: int, k: int, n: int) -> float:
    """float32 FLOP/s of (m, k) @ (k, n) on torch's threads, the best of REPEATS after a warm-up."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(4):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - start) / 4)
    return 2 * m * k * n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs")
    args = parser.parse_args()
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    enc = json.loads(_needed(ROOT / "models" / "sst2" / "model" / "config.json").read_text(encoding="utf-8"))
    lm = json.loads(_needed(ROOT / "models" / "lm" / "config.json").read_text(encoding="utf-8"))
    shape = enc["hidden_size"], enc["intermediate_size"], enc["num_hidden_layers"]

    sst2 = ragged_lengths(args.outputs / "attribute" / "sst2" / "importance.safetensors", "blank_out")
    switched = ragged_lengths(args.outputs / "attribute" / "sst2" / "switches.safetensors", "mask_blank=true")
    pronouns = ragged_lengths(
        args.outputs / "explain" / "pronouns" / "maps.safetensors", "integrated_gradients"
    )
    steps = int(params["pronouns"]["ig_steps"])
    attribution = params["attribution"]
    # copies per sentence: its tokens less the never-blanked ones (the configured positions and the
    # end marker, [SEP], as `method_options` skips them); the switches keep the configured positions
    kept = len(BLANK_POSITIONS[attribution["blank_positions"]]) + END_MARKERS
    per_forward = attribution["batch_size"]  # copies per forward

    work = {  # name: (FLOPs, the product shape that dominates it: rows, in, out)
        "blank-out, configured (Tables 1-3)": (
            sum((t - kept) * encoder_forward_flops(int(t), *shape) for t in sst2),
            (per_forward * int(sst2.mean()), enc["hidden_size"], enc["intermediate_size"]),
        ),
        f"blank-out, 2 switches x {len(switched)} sentences": (
            2 * sum((t - kept) * encoder_forward_flops(int(t), *shape) for t in switched),
            (per_forward * int(switched.mean()), enc["hidden_size"], enc["intermediate_size"]),
        ),
        f"integrated gradients, {steps} points x {len(pronouns)} sentences": (
            steps * sum(llama_input_gradient_flops(int(t), lm) for t in pronouns),
            (
                params["pronouns"]["batch_size"] * steps * int(pronouns.mean()),
                lm["hidden_size"],
                lm["intermediate_size"],
            ),
        ),
    }
    shapes = [*dict.fromkeys(dims for _, dims in work.values()), (2048, 2048, 2048)]
    rates = {dims: 0.0 for dims in shapes}
    for _ in range(ROUNDS):  # the highest rate seen: the lowest floor
        for dims in shapes:
            rates[dims] = max(rates[dims], product_rate(*dims))
    square = rates[(2048, 2048, 2048)]
    table = read_table(_needed(ROOT / "reports" / "stage_times.csv"))
    times = {(r.stage, r.task): float(r.seconds) for r in table.itertuples()}

    best = max(rates.values())  # any shape's: a floor for any batching of the same products
    rows, total, total_best = [], 0.0, 0.0
    print(f"threads {torch.get_num_threads()}, load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"float32 products: {square / 1e9:.0f} GFLOP/s at 2048^3, best of any shape {best / 1e9:.0f}")
    for name, (flops, dims) in work.items():
        floor, floor_best = flops / rates[dims], flops / best
        total, total_best = total + floor, total_best + floor_best
        rows.append(
            dict(
                work=name, tflop=flops / 1e12, shape=list(dims), gflops=rates[dims] / 1e9, floor_s=floor,
                floor_best_s=floor_best,
            )
        )  # fmt: skip
        print(
            f"{name}: {flops / 1e12:.2f} TFLOP; at its shape {dims} {rates[dims] / 1e9:.0f} GFLOP/s -> "
            f"{floor:.1f} s; at the best rate {floor_best:.1f} s"
        )
    attribute, pron = times.get(("attribute", "sst2")), times.get(("pronouns", ""))
    print(
        f"floor of these three: {total:.1f} s at their shapes, {total_best:.1f} s at the best rate, "
        f"of the {GOAL_S:.0f} s goal ({total / GOAL_S:.0%}, {total_best / GOAL_S:.0%})"
    )
    others = totals(table)["non-training"] - (attribute or 0.0) - (pron or 0.0)
    print(
        f"last dvc repro: attribute@sst2 {attribute} s, pronouns {pron} s; the other non-training stages {others:.1f} s"
    )
    result = dict(
        rows=rows,
        floor_s=total,
        floor_best_s=total_best,
        best_gflops=best / 1e9,
        goal_s=GOAL_S,
        square_gflops=square / 1e9,
        threads=torch.get_num_threads(),
        load=os.getloadavg(),
        stage_seconds={"attribute@sst2": attribute, "pronouns": pron, "other_non_training": others},
    )
    write_json(OUT, result)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
