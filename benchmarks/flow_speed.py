"""Attention flow / rollout speed: attnflow vs the authors' networkx formulation vs scipy's Dinic,
and vs today's attnflow before the speed work (the frozen copy in benchmarks/_baseline).

    python benchmarks/flow_speed.py            # full run, ~5-10 minutes on 2 busy cores
    python benchmarks/flow_speed.py --quick    # smaller baseline subsamples, for a smoke test

Workloads (random attention, seed fixed): per head, logits ~ N(0, SHARPNESS^2) -> softmax; the
library averages heads and mixes the residual (A = .5 W + .5 I), as in the study.

1. Table 1: 2000 samples x 6 layers x 8 heads, n = 20 tokens; flow from CLS at every layer to
   every token (the study's workload): 2000 x 6 x 20 max-flow values. Target: >= 50x scipy.
2. All-pairs: one input, 12 layers x 12 heads x 128 tokens; flow from every position of every
   layer to every token: 12 x 128 x 128 max-flow values (the paper's O(d^2 n^4) case). Target <= 10 s.
3. One-sample calls: `attention_flow(sample, sources=[0])` and `attention_rollout(sample)` on one
   6 layers x 8 heads x 20 tokens sample, median over repeated calls (validation included).
   Targets: flow <= 1 ms, rollout <= 0.2 ms.
4. Rollout: 2000 x 6 layers x 8 heads x 20 x 20.

Baselines, both timed on a random subsample of the (source, sink) pairs and extrapolated linearly
to the whole workload (stated in the table): networkx = the authors' formulation (one DiGraph
over all layers, `maximum_flow_value` with Edmonds-Karp per pair); scipy = `maximum_flow(...,
method="dinic")` per pair on the same graph with capacities scaled by SCIPY_SCALE and rounded to
integers (Dinic needs integer capacities). attnflow (and the frozen copy, "before") are timed on
the whole workload through the public API (`attention_flow`, validation included), after a
warm-up call; numba's compile time (from an empty cache, in a fresh process) and the warm-up are
reported on their own line. max |diff| compares un-normalised max-flow values on the subsampled
pairs (and on every value against the frozen copy).
Writes benchmarks/results/flow_speed.json next to the printed table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _baseline as before  # noqa: E402  (attnflow.explain as it was before the speed work)
import numba  # noqa: E402
import scipy  # noqa: E402
from scipy.sparse import csr_matrix  # noqa: E402
from scipy.sparse.csgraph import maximum_flow  # noqa: E402

from attnflow.explain import attention_flow, attention_rollout  # noqa: E402
from attnflow.explain._maxflow import warm_up  # noqa: E402
from attnflow.explain._reference import reference_graph  # noqa: E402

SEED = 0
SHARPNESS = 3.0  # std of the attention logits per head: peaked but not one-hot heads
SCIPY_SCALE = 1e6  # capacities x this, rounded to int, for scipy's integer Dinic
# from the issue: Table 1 >= 50x scipy's Dinic; all-pairs <= 10 s; one-sample calls <= 1 ms / 0.2 ms
TARGETS = {"table1_x_scipy": 50.0, "allpairs_s": 10.0, "one_flow_ms": 1.0, "one_rollout_ms": 0.2}
ONE_CALLS = 300  # repeated one-sample calls; the median is reported


def random_attention(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Softmax of N(0, SHARPNESS^2) logits over the last axis (float64, so that max |diff| shows
    the solver's precision rather than float32 output rounding)."""
    logits = rng.standard_normal(shape) * SHARPNESS
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def mixed(attn: np.ndarray) -> np.ndarray:
    """The authors' capacities for one sample: mean heads, + I, re-normalise. (L, T, T) float64."""
    a = 0.5 * attn.astype(np.float64).mean(axis=1) + 0.5 * np.eye(attn.shape[-1])
    return a / a.sum(-1, keepdims=True)


def scipy_graph(caps: np.ndarray) -> csr_matrix:
    """The same layered graph as networkx, integer capacities round(c * SCIPY_SCALE)."""
    n_layers, tokens, _ = caps.shape
    size = (n_layers + 1) * tokens
    rows, cols, vals = [], [], []
    for layer in range(1, n_layers + 1):
        c = np.rint(caps[layer - 1] * SCIPY_SCALE).astype(np.int32)
        i, k = np.nonzero(c)
        rows.append(layer * tokens + i)
        cols.append((layer - 1) * tokens + k)
        vals.append(c[i, k])
    return csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size)
    )


def time_networkx(samples: list[np.ndarray], pairs: list[list[tuple[int, int, int]]]) -> tuple[float, dict]:
    """Seconds for the given (layer, source, sink) pairs of each sample, graph building included."""
    import networkx as nx
    from networkx.algorithms.flow import edmonds_karp

    values = {}
    start = time.perf_counter()
    for b, (caps, todo) in enumerate(zip(samples, pairs, strict=True)):
        graph = reference_graph(caps)
        tokens = caps.shape[-1]
        for layer, s, j in todo:
            values[b, layer, s, j] = nx.maximum_flow_value(
                graph, (layer + 1) * tokens + s, j, flow_func=edmonds_karp
            )
    return time.perf_counter() - start, values


def time_scipy(samples: list[np.ndarray], pairs: list[list[tuple[int, int, int]]]) -> tuple[float, dict]:
    values = {}
    start = time.perf_counter()
    for b, (caps, todo) in enumerate(zip(samples, pairs, strict=True)):
        graph = scipy_graph(caps)
        tokens = caps.shape[-1]
        for layer, s, j in todo:
            res = maximum_flow(graph, (layer + 1) * tokens + s, j, method="dinic")
            values[b, layer, s, j] = res.flow_value / SCIPY_SCALE
    return time.perf_counter() - start, values


def max_diff(ours: dict, theirs: dict) -> float:
    return float(max(abs(ours[key] - value) for key, value in theirs.items()))


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def table1(rng: np.random.Generator, quick: bool, with_before: bool) -> dict:
    n_samples, n_layers, n_heads, tokens = 2000, 6, 8, 20
    attn = random_attention(rng, (n_samples, n_layers, n_heads, tokens, tokens))
    t_ours, ours = timed(lambda: attention_flow(attn, sources=[0], normalize=False))  # (B, L, 1, T)
    t_before, diff_before = None, None
    if with_before:
        t_before, theirs = timed(lambda: before.attention_flow(attn, sources=[0], normalize=False))
        diff_before = float(np.abs(ours - theirs).max())
    every_pair = [(layer, 0, j) for layer in range(n_layers) for j in range(tokens)]
    nx_idx = rng.choice(n_samples, 2 if quick else 5, replace=False)
    sp_idx = rng.choice(n_samples, 10 if quick else 50, replace=False)
    t_nx, v_nx = time_networkx([mixed(attn[b]) for b in nx_idx], [every_pair] * len(nx_idx))
    t_sp, v_sp = time_scipy([mixed(attn[b]) for b in sp_idx], [every_pair] * len(sp_idx))
    ours_nx = {
        (i, layer, s, j): ours[b, layer, 0, j] for i, b in enumerate(nx_idx) for layer, s, j in every_pair
    }
    ours_sp = {
        (i, layer, s, j): ours[b, layer, 0, j] for i, b in enumerate(sp_idx) for layer, s, j in every_pair
    }
    return {
        "workload": f"Table 1: {n_samples} x {n_layers} layers x CLS -> {tokens} tokens",
        "pairs": n_samples * n_layers * tokens,
        "attnflow_s": t_ours,
        "before_s": t_before,
        "max_diff_before": diff_before,
        "networkx_s": t_nx * n_samples / len(nx_idx),
        "networkx_note": f"{len(nx_idx)} samples timed ({t_nx:.1f} s), x{n_samples / len(nx_idx):.0f}",
        "scipy_s": t_sp * n_samples / len(sp_idx),
        "scipy_note": f"{len(sp_idx)} samples timed ({t_sp:.1f} s), x{n_samples / len(sp_idx):.0f}",
        "max_diff_networkx": max_diff(ours_nx, v_nx),
        "max_diff_scipy": max_diff(ours_sp, v_sp),
        "target": f">= {TARGETS['table1_x_scipy']:.0f}x scipy",
    }


def allpairs(rng: np.random.Generator, quick: bool, with_before: bool) -> dict:
    n_layers, n_heads, tokens = 12, 12, 128
    attn = random_attention(rng, (n_layers, n_heads, tokens, tokens))
    t_ours, ours = timed(lambda: attention_flow(attn, normalize=False))  # (L, T, T): every source
    t_before, diff_before = None, None
    if with_before:
        t_before, theirs = timed(lambda: before.attention_flow(attn, normalize=False))
        diff_before = float(np.abs(ours - theirs).max())
    n_pairs = n_layers * tokens * tokens

    def draw(k: int) -> list[tuple[int, int, int]]:
        flat = rng.choice(n_pairs, k, replace=False)
        return [tuple(int(v) for v in np.unravel_index(f, (n_layers, tokens, tokens))) for f in flat]

    caps = mixed(attn)
    nx_pairs, sp_pairs = draw(1 if quick else 4), draw(50 if quick else 300)  # networkx: ~1 min per pair
    # graph building is done once for the whole workload: time it apart and add it once
    t_build = time.perf_counter()
    reference_graph(caps)
    t_build = time.perf_counter() - t_build
    t_nx, v_nx = time_networkx([caps], [nx_pairs])
    t_sp_build = time.perf_counter()
    scipy_graph(caps)
    t_sp_build = time.perf_counter() - t_sp_build
    t_sp, v_sp = time_scipy([caps], [sp_pairs])
    ours_nx = {(0, *key): ours[key] for key in nx_pairs}
    ours_sp = {(0, *key): ours[key] for key in sp_pairs}
    return {
        "workload": f"All-pairs: 1 input, {n_layers} layers x {tokens} tokens, every source -> every token",
        "pairs": n_pairs,
        "attnflow_s": t_ours,
        "before_s": t_before,
        "max_diff_before": diff_before,
        "networkx_s": t_build + (t_nx - t_build) * n_pairs / len(nx_pairs),
        "networkx_note": f"{len(nx_pairs)} random pairs timed ({t_nx:.1f} s), x{n_pairs / len(nx_pairs):.0f}",
        "scipy_s": t_sp_build + (t_sp - t_sp_build) * n_pairs / len(sp_pairs),
        "scipy_note": f"{len(sp_pairs)} random pairs timed ({t_sp:.1f} s), x{n_pairs / len(sp_pairs):.0f}",
        "max_diff_networkx": max_diff(ours_nx, v_nx),
        "max_diff_scipy": max_diff(ours_sp, v_sp),
        "target": f"<= {TARGETS['allpairs_s']:.0f} s",
    }


def median_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def one_sample(rng: np.random.Generator, with_before: bool) -> dict:
    """One 6-layer x 8-head x 20-token sample, CLS rows: the interactive / small-call case."""
    sample = random_attention(rng, (6, 8, 20, 20))
    out = {
        "workload": "One sample: 6 layers x 8 heads x 20 tokens, flow from CLS / rollout",
        "calls": ONE_CALLS,
        "flow_ms": median_ms(lambda: attention_flow(sample, sources=[0]), ONE_CALLS),
        "rollout_ms": median_ms(lambda: attention_rollout(sample), ONE_CALLS),
        "before_flow_ms": None,
        "before_rollout_ms": None,
        "target_flow_ms": TARGETS["one_flow_ms"],
        "target_rollout_ms": TARGETS["one_rollout_ms"],
    }
    if with_before:
        out["before_flow_ms"] = median_ms(lambda: before.attention_flow(sample, sources=[0]), ONE_CALLS // 3)
        out["before_rollout_ms"] = median_ms(lambda: before.attention_rollout(sample), ONE_CALLS)
    np.testing.assert_allclose(
        attention_flow(sample, sources=[0]), before.attention_flow(sample, sources=[0]), atol=1e-9, rtol=0
    )
    return out


def rollout(rng: np.random.Generator) -> dict:
    n_samples, n_layers, n_heads, tokens = 2000, 6, 8, 20
    attn = random_attention(rng, (n_samples, n_layers, n_heads, tokens, tokens))
    attention_rollout(attn[:2])
    start = time.perf_counter()
    ours = attention_rollout(attn)
    t_ours = time.perf_counter() - start
    # the authors' loop (compute_joint_attention): one sample at a time, layer by layer
    start = time.perf_counter()
    worst = 0.0
    for b in range(n_samples):
        caps = mixed(attn[b])
        joint = caps[0]
        for layer in range(1, n_layers):
            joint = caps[layer] @ joint
        worst = max(worst, float(np.abs(joint - ours[b, -1]).max()))
    t_loop = time.perf_counter() - start
    return {
        "workload": f"Rollout: {n_samples} x {n_layers} layers x {n_heads} heads x {tokens} x {tokens}",
        "attnflow_s": t_ours,
        "loop_s": t_loop,
        "max_diff_loop": worst,
    }


def compile_seconds() -> float:
    """numba compile time of the solver from an empty cache, measured in a fresh process."""
    code = (
        "import time\nfrom attnflow.explain._maxflow import warm_up\n"
        "t = time.perf_counter()\nwarm_up()\nprint(time.perf_counter() - t)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp, PYTHONPATH=str(ROOT / "src"))
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    return float(run.stdout.split()[-1])


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def fmt_s(x: float | None) -> str:
    return "n/a" if x is None else (f"{x:.2f}" if x < 100 else f"{x:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller baseline subsamples")
    parser.add_argument("--no-before", action="store_true", help="skip timing the frozen pre-speed-work copy")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "flow_speed.json")
    args = parser.parse_args()
    with_before = not args.no_before

    rng = np.random.default_rng(SEED)
    load_before = load()
    t_compile = compile_seconds()
    start = time.perf_counter()
    warm_up()  # compiled code from the on-disk cache (or compiled now, the first time)
    t_warm = time.perf_counter() - start
    small = random_attention(np.random.default_rng(1), (4, 6, 8, 20, 20))
    for lib in (before, sys.modules["attnflow.explain"]):  # load both libraries' kernels
        lib.attention_flow(small, sources=[0])
        lib.attention_flow(small[:, :4, :, :8, :8] / small[:, :4, :, :8, :8].sum(-1, keepdims=True))
    rows = []
    for name, fn in (("Table 1", table1), ("All-pairs", allpairs)):
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append(fn(rng, args.quick, with_before))
    print("running the one-sample calls ...", file=sys.stderr, flush=True)
    one = one_sample(rng, with_before)
    print("running Rollout ...", file=sys.stderr, flush=True)
    roll = rollout(rng)
    load_after = load()

    print(
        f"attention flow speed -- {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"numba {numba.__version__} ({numba.get_num_threads()} threads), scipy {scipy.__version__}"
    )
    print(f"load average before / after: {load_before} / {load_after}   (other processes share these cores)")
    print(
        f"numba: compile from an empty cache {t_compile:.1f} s (fresh process); first call here "
        f"{t_warm:.2f} s (cached code); neither is in the times below"
    )
    print(
        f"scipy: Dinic on integer capacities round(c x {SCIPY_SCALE:.0e}); baselines extrapolated from subsamples;"
        " before = attnflow before the speed work (benchmarks/_baseline), same run"
    )
    print()
    head = (
        f"{'workload':<74} {'networkx s':>11} {'scipy s':>9} {'before s':>9} {'attnflow s':>10} "
        f"{'x nx':>9} {'x scipy':>8} {'x before':>8} {'target':>15} {'max|d| nx':>10} {'max|d| scipy':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        r["speedup_networkx"] = r["networkx_s"] / r["attnflow_s"]
        r["speedup_scipy"] = r["scipy_s"] / r["attnflow_s"]
        r["speedup_before"] = None if r["before_s"] is None else r["before_s"] / r["attnflow_s"]
        if r["workload"].startswith("Table 1"):
            r["target_met"] = bool(r["speedup_scipy"] >= TARGETS["table1_x_scipy"])
        else:
            r["target_met"] = bool(r["attnflow_s"] <= TARGETS["allpairs_s"])
        before_s = "n/a" if r["before_s"] is None else fmt_s(r["before_s"])
        before_x = "" if r["speedup_before"] is None else f"{r['speedup_before']:.1f}"
        print(
            f"{r['workload']:<74} {fmt_s(r['networkx_s']):>11} {fmt_s(r['scipy_s']):>9} {before_s:>9} "
            f"{r['attnflow_s']:>10.2f} {r['speedup_networkx']:>9,.0f} {r['speedup_scipy']:>8.1f} {before_x:>8} "
            f"{r['target'] + (' ok' if r['target_met'] else ' NO'):>15} "
            f"{r['max_diff_networkx']:>10.1e} {r['max_diff_scipy']:>12.1e}"
        )
    print()
    one["flow_met"] = bool(one["flow_ms"] <= one["target_flow_ms"])
    one["rollout_met"] = bool(one["rollout_ms"] <= one["target_rollout_ms"])
    for what in ("flow", "rollout"):
        was = one[f"before_{what}_ms"]
        print(
            f"{'One sample (6 layers x 8 heads x 20 tokens): ' + what + (' from CLS' if what == 'flow' else ''):<74} "
            f"median {one[what + '_ms']:.3f} ms over {ONE_CALLS} calls"
            + ("" if was is None else f"  (before: {was:.3f} ms, x{was / one[what + '_ms']:.1f})")
            + f"   target <= {one['target_' + what + '_ms']} ms: {'ok' if one[what + '_met'] else 'NO'}"
        )
    print(
        f"{roll['workload']:<74} {roll['attnflow_s']:.3f} s   (the authors' per-sample loop, last layer only, "
        f"no input checks: {roll['loop_s']:.2f} s; max |diff| vs it {roll['max_diff_loop']:.1e})"
    )
    print()
    for r in rows:
        print(f"  {r['workload'].split(':')[0]}: networkx {r['networkx_note']}; scipy {r['scipy_note']}")
        if r["max_diff_before"] is not None:
            print(f"    max |diff| vs before, every value: {r['max_diff_before']:.1e}")
    checks = [(r["workload"].split(":")[0], r["target_met"]) for r in rows]
    checks += [("one-sample flow", one["flow_met"]), ("one-sample rollout", one["rollout_met"])]
    met = all(ok for _, ok in checks)
    print(
        f"  targets {'met' if met else 'NOT met'}: "
        + ", ".join(f"{n} {'yes' if ok else 'no'}" for n, ok in checks)
    )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "python benchmarks/flow_speed.py"
        + (" --quick" if args.quick else "")
        + (" --no-before" if args.no_before else ""),
        "seed": SEED,
        "sharpness": SHARPNESS,
        "scipy_scale": SCIPY_SCALE,
        "cpus": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "numba_compile_s": t_compile,
        "first_call_s": t_warm,
        "targets": TARGETS,
        "flow": rows,
        "one_sample": one,
        "rollout": roll,
        "targets_met": met,
    }
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.out)  # atomic: never a half-written result


if __name__ == "__main__":
    main()
