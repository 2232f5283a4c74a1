"""Device-native methods: float32 torch against the float64 numpy path, on the same random inputs.

    python benchmarks/device_precision.py                 # 2 x 12 layers x 12 heads x 128 tokens
    python benchmarks/device_precision.py --tokens 16     # smoke test
    python benchmarks/device_precision.py --device cuda   # torch on a GPU, when there is one

Every device-native method -- `raw_attention`, `attention_rollout`, `chefer_generic`, `chefer_lrp`
and the kit's `grad_sam` -- is given one float64 input as numpy arrays (the study's path, the
reference) and as float32 torch tensors on --device. Inputs, seeded: attention = softmax(3 z) over
the keys, z standard normal, of shape (B, L, H, T, T); the gradient ∇A standard normal; the relevance
R(A) = z' * A (z' standard normal). For each method the script reports max |float32 - float64| over
the map, the map's largest entry max |float64|, their ratio (the relative difference the docs
quote: float32 rounding is ~6e-8), and the time of one call on each path (best of --repeats,
alternating, same process: the ratio numpy / torch is measured in one run).
Writes benchmarks/results/device_precision.json after each method (a late kill keeps the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "device_precision.json"
SHAPE = (2, 12, 12, 128)  # batch, layers, heads, tokens
SHARPNESS = 3.0  # softmax(3 z): peaked rows, like a trained model's
SEED = 0


def inputs(batch: int, layers: int, heads: int, tokens: int):
    """(attention, ∇A, R(A)) as float64 torch tensors, (B, L, H, T, T)."""
    import torch

    torch.manual_seed(SEED)
    shape = (batch, layers, heads, tokens, tokens)
    attn = torch.softmax(torch.randn(shape, dtype=torch.float64) * SHARPNESS, -1)
    grad = torch.randn(shape, dtype=torch.float64)
    rel = torch.randn(shape, dtype=torch.float64) * attn
    return attn, grad, rel


def methods() -> dict:
    """name -> f(attn, grad, rel): every device-native method, numpy or torch in, the same out."""
    from attnflow.explain import attention_rollout, chefer_generic, chefer_lrp, raw_attention
    from attnflow.methods import METHODS

    return {
        "raw": lambda a, g, r: raw_attention(a),
        "rollout": lambda a, g, r: attention_rollout(a),
        "chefer_generic": lambda a, g, r: chefer_generic(a, g),
        "chefer_lrp": lambda a, g, r: chefer_lrp(r, g),
        "grad_sam": lambda a, g, r: METHODS["grad_sam"].function(a, attn_grad=g),
    }


def measure(name, method, arrays, tensors, device: str, repeats: int) -> dict:
    import torch

    def on_torch():
        out = method(*tensors)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    want = np.asarray(method(*arrays))  # (B, L, T, T) float64
    got = on_torch().double().cpu().numpy()
    best = {"numpy": np.inf, "torch": np.inf}
    for _ in range(repeats):
        for path, call in (("numpy", lambda: method(*arrays)), ("torch", on_torch)):
            t0 = time.perf_counter()
            call()
            best[path] = min(best[path], time.perf_counter() - t0)
    diff, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    return {
        "method": name, "shape": list(want.shape), "max_abs_diff": diff, "max_abs_float64": scale,
        "relative": diff / scale if scale > 0 else float("nan"), "numpy_float64_s": best["numpy"],
        "torch_float32_s": best["torch"], "speedup": best["numpy"] / best["torch"], "load": os.getloadavg(),
    }  # fmt: skip


def _save(meta: dict, rows: list[dict]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    tmp.replace(RESULTS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=SHAPE[0])
    ap.add_argument("--layers", type=int, default=SHAPE[1])
    ap.add_argument("--heads", type=int, default=SHAPE[2])
    ap.add_argument("--tokens", type=int, default=SHAPE[3])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    import torch

    shape = (args.batch, args.layers, args.heads, args.tokens)
    attn, grad, rel = inputs(*shape)
    arrays = tuple(x.numpy() for x in (attn, grad, rel))
    tensors = tuple(x.float().to(args.device) for x in (attn, grad, rel))
    meta = {"shape_blhtt": [*shape, args.tokens], "device": args.device, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "seed": SEED, "load_before": os.getloadavg()}  # fmt: skip
    print(
        f"load average {meta['load_before']}; (B, L, H, T, T) = {tuple(meta['shape_blhtt'])}, {args.device}"
    )
    rows: list[dict] = []
    for name, method in methods().items():
        rows.append(measure(name, method, arrays, tensors, args.device, args.repeats))
        _save(meta, rows)
        r = rows[-1]
        print(
            f"{name:<15} max|diff| {r['max_abs_diff']:.2e}  max|float64| {r['max_abs_float64']:.2e}  "
            f"relative {r['relative']:.2e}  numpy float64 {r['numpy_float64_s']:.4f} s, "
            f"torch float32 {r['torch_float32_s']:.4f} s ({r['speedup']:.2f}x)",
            flush=True,
        )
    meta["load_after"] = os.getloadavg()
    _save(meta, rows)
    print(f"load average {meta['load_after']}; wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
