"""The compiled max-flow kernels give the former numba kernels' values bit for bit.

    python benchmarks/flow_bitwise.py --old /tmp/numba_ref           # ~15 min on 2 busy cores
    python benchmarks/flow_bitwise.py --old /tmp/numba_ref --quick

--old is a folder holding the numba solver as the package `numba_maxflow`: src/attnflow/explain/_maxflow
as of commit b7ec204 (the last with numba; numba must be installed), e.g.
`mkdir -p DIR && git archive b7ec204 src/attnflow/explain/_maxflow | tar -x -C DIR --strip-components=3
&& mv DIR/_maxflow DIR/numba_maxflow`. Both solvers get the same inputs through `layered_max_flow`: random attention
graphs of many shapes (1-12 layers, 1-70 tokens, padded batches, CLS rows, every row, random row
subsets, head rows; sharp, flat, with exact zeros and ties), then real-shaped ones: Table-1 CLS
flow (100 x 6 layers x 20 tokens), all pairs at 12 x 12 x 128, every row at 2 x 2048. The new one
runs with 1, 2 and 3 threads. Prints the largest absolute difference (must be 0.0) and writes
benchmarks/results/flow_bitwise.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def mixed(rng, layers, tokens, sharpness=3.0, heads=4, zeros=0.0, ties=False):
    if ties:
        w = rng.choice([0.0, 0.25, 0.5, 1.0], size=(layers, heads, tokens, tokens))
        w[..., 0] += 1e-3
    else:
        logits = rng.standard_normal((layers, heads, tokens, tokens)) * sharpness
        w = np.exp(logits - logits.max(-1, keepdims=True))
    w[rng.random(w.shape) < zeros] = 0.0
    w = w / np.maximum(w.sum(-1, keepdims=True), 1e-300)
    a = 0.5 * w.mean(1) + 0.5 * np.eye(tokens)
    return a / a.sum(-1, keepdims=True)


def random_case(rng):
    """(caps, lengths, row_b, row_L, supply) of a random call, rows sorted by (sample, layer)."""
    batch = int(rng.integers(1, 4))
    layers = int(rng.integers(1, 9))
    N = int(rng.choice([1, 2, 3, 5, 8, 13, 20, 33, 64, 65, 70]))
    lengths = rng.integers(max(1, N // 2), N + 1, size=batch)
    caps = np.zeros((batch, layers, N, N))
    for b, n in enumerate(lengths):
        caps[b, :, :n, :n] = mixed(
            rng,
            layers,
            n,
            sharpness=float(rng.choice([0.5, 3.0, 8.0])),
            zeros=float(rng.choice([0.0, 0.3])),
            ties=bool(rng.random() < 0.2),
        )
    kind = rng.choice(["cls", "all", "subset", "repeat"])
    rows = []
    for b, n in enumerate(lengths):
        for L in range(1, layers + 1):
            if kind == "cls":
                srcs = [0]
            elif kind == "all":
                srcs = list(range(n))
            elif kind == "subset":
                srcs = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
            else:  # several rows per source: heads on top (random rows), swept
                srcs = rng.integers(0, n, size=int(rng.integers(1, 3 * n + 1))).tolist()
            for s in srcs:
                rows.append((b, L, s))
    row_b = np.array([r[0] for r in rows], np.int64)
    row_L = np.array([r[1] for r in rows], np.int64)
    supply = caps[row_b, row_L - 1, [r[2] for r in rows]]
    if kind == "repeat":  # rows that are not a layer's rows: perturbed, renormalised
        supply = supply * (1 + rng.random(supply.shape))
        supply = supply / np.maximum(supply.sum(-1, keepdims=True), 1e-300)
        supply[caps[row_b, 0, 0] == 0] = 0.0
        for r, b in enumerate(row_b):
            supply[r, lengths[b] :] = 0.0
    return caps, lengths, row_b, row_L, supply


def real_cases(quick: bool):
    rng = np.random.default_rng(0)
    # Table 1: 100 samples x 6 layers x 20 tokens, CLS rows of every layer
    n_s = 20 if quick else 100
    caps = np.stack([mixed(rng, 6, 20, heads=8) for _ in range(n_s)])
    row_b = np.repeat(np.arange(n_s), 6)
    row_L = np.tile(np.arange(1, 7), n_s)
    yield "table1_cls_batched", (caps, np.full(n_s, 20), row_b, row_L, caps[row_b, row_L - 1, 0])
    yield "table1_cls_one", (caps[:1], np.array([20]), row_b[:6], row_L[:6], caps[0, np.arange(6), 0])
    # all pairs of a BERT-base-sized graph
    L, T = (6, 64) if quick else (12, 128)
    caps = mixed(rng, L, T, heads=12)[None]
    row_L = np.repeat(np.arange(1, L + 1), T)
    yield (
        f"all_pairs_{L}x{T}",
        (caps, np.array([T]), np.zeros_like(row_L), row_L, caps[0, row_L - 1, np.tile(np.arange(T), L)]),
    )
    # CLS flow of the same graph
    yield f"cls_{L}x{T}", (caps, np.array([T]), np.zeros(L, np.int64), np.arange(1, L + 1), caps[0, :, 0])
    # every row at 2 layers x 2048 tokens (closed forms)
    T = 256 if quick else 2048
    caps = mixed(rng, 2, T, heads=2)[None]
    row_L = np.repeat([1, 2], T)
    yield (
        f"every_row_2x{T}",
        (caps, np.array([T]), np.zeros_like(row_L), row_L, caps[0, row_L - 1, np.tile(np.arange(T), 2)]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="folder holding the numba solver as `numba_maxflow`")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    os.environ["ATTNFLOW_JIT"] = "compile"  # the old solver: its compiled kernels, never its twins
    sys.path.insert(0, args.old)
    import numba_maxflow as old

    from attnflow.explain import _maxflow as new

    worst, n_values, n_calls, report = 0.0, 0, 0, {}

    def compare(name, case):
        nonlocal worst, n_values, n_calls
        t = time.perf_counter()
        ref = old.layered_max_flow(*case, progress=False)
        t_old = time.perf_counter() - t
        diffs = []
        for threads in (1, 2, 3):
            t = time.perf_counter()
            got = new.layered_max_flow(*case, progress=False, threads=threads)
            t_new = time.perf_counter() - t
            diffs.append(float(np.abs(got - ref).max(initial=0.0)))
            bitwise = got.view(np.uint64) == ref.view(np.uint64)
            # +0.0 and -0.0 are the same value; anything else must match bit for bit
            if not np.all(bitwise | ((got == 0) & (ref == 0))):
                print(f"MISMATCH in {name} with {threads} threads", flush=True)
        n_values += ref.size
        n_calls += 1
        worst = max(worst, *diffs)
        return max(diffs), t_old, t_new

    rng = np.random.default_rng(12345)
    n_cases = 40 if args.quick else args.cases
    for _ in range(n_cases):
        compare("random", random_case(rng))
    report["random"] = {"cases": n_cases, "max_abs_diff": worst}
    print(f"random: {n_cases} calls, max abs diff {worst!r}", flush=True)
    for name, case in real_cases(args.quick):
        diff, t_old, t_new = compare(name, case)
        report[name] = {"max_abs_diff": diff, "numba_s": t_old, "compiled_s_3_threads": t_new}
        print(f"{name}: max abs diff {diff!r} (numba {t_old:.3f} s, compiled {t_new:.3f} s)", flush=True)
    report["summary"] = {"calls": n_calls, "values": n_values, "max_abs_diff": worst}
    print(f"all: {n_calls} calls x 3 thread counts, {n_values} values, max abs diff {worst!r}")
    out = ROOT / "benchmarks" / "results" / "flow_bitwise.json"
    if not args.quick:
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
