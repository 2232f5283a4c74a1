"""Attention-flow speed against scipy's maximum_flow, timed in the same run.

    python benchmarks/flow_speed.py              # full run, ~30 s on 2 cores
    python benchmarks/flow_speed.py --quick      # smaller workloads and subsamples (smoke test)
    python benchmarks/flow_speed.py --only busy  # one section (table1, allpairs, long, first, busy)

Baseline: scipy = `scipy.sparse.csgraph.maximum_flow(..., method="dinic")` per (source, sink) pair
on the layered graph, capacities x SCIPY_SCALE rounded to integers (Dinic needs integers), timed on
random subsamples and extrapolated linearly (each row's note says how many), graph building
included; for Table 1 the fastest of SCIPY_PASSES passes, as ours is the fastest of its calls.
Ours = the public `attention_flow` (validation included) after one untimed call; the
max-flow kernels are compiled into the package, so nothing is compiled during any call.

Sections (random attention, seed fixed: per head, logits ~ N(0, SHARPNESS^2) -> softmax; heads
averaged, residual 0.5 as in the study), each written to the JSON as soon as it finishes:
1. table1: 100 samples x 6 layers x 8 heads x 20 tokens, flow from CLS at every layer to every
   token: one call per sample, and all 100 in one call. Targets >= 100x / >= 250x scipy.
2. allpairs: 1 x 12 layers x 12 heads x 128 tokens, every source -> every token. Target <= 4 s.
3. long: 1 x 2 layers x 2 heads x 2048 tokens, every row.
4. first: a fresh process (interpreter start, import, first call) computing CLS flow of a
   BERT-base-sized sample (12 x 12 x 128), against the same call warm in that process. Targets:
   first call <= 1.5x the warm call, end to end <= 3 s. `from attnflow.explain import
   attention_flow` runs before the clock of the call starts (until 2026-11-26 the attribute access
   `attnflow.explain.attention_flow` imported the solver module lazily inside the timed call:
   ~15 ms of import counted as the call).
5. busy: two busy loops (processes spinning on the machine's cores) running, then one-sample CLS
   calls with the thread count chosen by attnflow (the CPUs free now) against ATTNFLOW_THREADS=1
   and =2, interleaved, medians. Target: the chosen count is no slower than one thread.
Writes benchmarks/results/flow_speed.json (+ prints the table, the thread settings, `uptime`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

import attnflow.explain as lib
from attnflow import stage_cache
from attnflow.explain import flow_threads

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
SHARPNESS = 3.0  # std of the attention logits per head: peaked but not one-hot heads
SCIPY_SCALE = 1e6  # capacities x this, rounded to int, for scipy's integer Dinic
SCIPY_PASSES = 5  # Table 1: scipy's time is the fastest of this many passes (it varies 22-28 ms by pass)
TARGETS = {
    "single_x_scipy": 100.0,
    "batched_x_scipy": 250.0,
    "allpairs_s": 4.0,
    "first_over_warm": 1.5,
    "first_end_to_end_s": 3.0,
    "busy_over_single": 1.0,
}
# "no slower" under contention, where two runs of the same code differ by a few percent
BUSY_NOISE = 1.05


def random_attention(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Softmax of N(0, SHARPNESS^2) logits over the last axis, float64."""
    logits = rng.standard_normal(shape) * SHARPNESS
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def mixed(attn: np.ndarray) -> np.ndarray:
    """The authors' capacities for one sample: mean heads, + I, re-normalise. (L, T, T) float64."""
    a = 0.5 * attn.astype(np.float64).mean(axis=1) + 0.5 * np.eye(attn.shape[-1])
    return a / a.sum(-1, keepdims=True)


def scipy_graph(caps: np.ndarray) -> csr_matrix:
    """The layered graph (node layer * T + position), integer capacities round(c * SCIPY_SCALE)."""
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


def time_scipy(
    samples: list[np.ndarray], pairs: list[tuple[int, int, int]], passes: int = 1
) -> tuple[float, dict]:
    """Seconds for the (layer, source, sink) pairs of each sample, graph building included: the
    fastest of `passes` passes over all samples (ours is the fastest of its timed calls too)."""
    values, times = {}, []
    for _ in range(passes):
        start = time.perf_counter()
        for b, caps in enumerate(samples):
            graph = scipy_graph(caps)
            tokens = caps.shape[-1]
            for layer, s, j in pairs:
                res = maximum_flow(graph, (layer + 1) * tokens + s, j, method="dinic")
                values[b, layer, s, j] = res.flow_value / SCIPY_SCALE
        times.append(time.perf_counter() - start)
    return min(times), values


def best_seconds(fn, repeats: int) -> float:
    """The fastest of `repeats` timed calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def row(figure, ours, unit, baseline, base, note="", target=None) -> dict:
    """One printed figure: ours, the baseline's number, ours as a speed-up over it, the target."""
    ratio = None if base is None else base / ours
    met = None if target is None else bool(target(ours, ratio))
    return dict(
        figure=figure, ours=ours, unit=unit, baseline=baseline, base=base, ratio=ratio, note=note, met=met
    )


def table1(rng, quick: bool) -> list[dict]:
    n_samples, n_layers, n_heads, tokens = 100, 6, 8, 20
    attn = random_attention(rng, (n_samples, n_layers, n_heads, tokens, tokens))
    reps = 2 if quick else 5
    per = 1e3 / n_samples  # seconds for all -> ms per sample
    t_single = (
        best_seconds(lambda: [lib.attention_flow(a, sources=[0], normalize=False) for a in attn], reps) * per
    )
    t_batch = best_seconds(lambda: lib.attention_flow(attn, sources=[0], normalize=False), reps * 4) * per
    ours = lib.attention_flow(attn, sources=[0], normalize=False)[:, :, 0]  # (B, L, T)
    pairs = [(layer, 0, j) for layer in range(n_layers) for j in range(tokens)]
    sp_idx = rng.choice(n_samples, 5 if quick else 20, replace=False)
    passes = 1 if quick else SCIPY_PASSES
    t_sp, v_sp = time_scipy([mixed(attn[b]) for b in sp_idx], pairs, passes)
    sp_ms = t_sp / len(sp_idx) * 1e3
    d_sp = max(abs(ours[sp_idx[i], layer, j] - v) for (i, layer, _, j), v in v_sp.items())
    note = f"scipy: {len(sp_idx)} samples timed, fastest of {passes} passes, max|d| {d_sp:.0e} (its integer rounding)"
    name = f"Table 1 ({n_samples} x {n_layers}L x {n_heads}H x {tokens}T, CLS flow)"
    return [
        row(
            f"{name}, one call per sample",
            t_single,
            "ms/sample",
            "scipy Dinic",
            sp_ms,
            note,
            lambda o, r: r >= TARGETS["single_x_scipy"],
        ),
        row(
            f"{name}, all in one call",
            t_batch,
            "ms/sample",
            "scipy Dinic",
            sp_ms,
            note,
            lambda o, r: r >= TARGETS["batched_x_scipy"],
        ),
        row(
            f"{name}, all in one call",
            t_batch,
            "ms/sample",
            "single calls",
            t_single,
            "same library",
            lambda o, r: r > 1.0,
        ),
    ]


def allpairs(rng, quick: bool) -> list[dict]:
    n_layers, n_heads, tokens = (12, 12, 64) if quick else (12, 12, 128)
    attn = random_attention(rng, (n_layers, n_heads, tokens, tokens))
    lib.attention_flow(attn[:, :, :16, :16] / attn[:, :, :16, :16].sum(-1, keepdims=True))  # pool up
    start = time.perf_counter()
    ours = lib.attention_flow(attn, normalize=False, progress=False)
    t_ours = time.perf_counter() - start
    n_pairs = n_layers * tokens * tokens
    flat = rng.choice(n_pairs, 50 if quick else 300, replace=False)
    pairs = [tuple(int(v) for v in np.unravel_index(f, (n_layers, tokens, tokens))) for f in flat]
    t_sp, v_sp = time_scipy([mixed(attn)], pairs)
    t_sp *= n_pairs / len(pairs)
    d_sp = max(abs(ours[tuple(key)] - v) for (_, *key), v in v_sp.items())
    name = f"All pairs (1 x {n_layers}L x {n_heads}H x {tokens}T, every source)"
    note = f"scipy: {len(pairs)} pairs timed, x{n_pairs / len(pairs):.0f}; max|d| {d_sp:.0e}"
    return [
        row(
            name,
            t_ours,
            "s",
            "scipy Dinic",
            t_sp,
            note,
            None if quick else (lambda o, r: o <= TARGETS["allpairs_s"]),
        )
    ]


def long_sequence(rng, quick: bool) -> list[dict]:
    tokens = 512 if quick else 2048
    attn = random_attention(rng, (2, 2, tokens, tokens))
    start = time.perf_counter()
    ours = lib.attention_flow(attn, normalize=False, progress=False)
    t_ours = time.perf_counter() - start
    n_pairs = 2 * tokens * tokens
    pairs = [(int(rng.integers(2)), int(rng.integers(tokens)), int(rng.integers(tokens))) for _ in range(3)]
    t_sp, v_sp = time_scipy([mixed(attn)], pairs)
    d_sp = max(abs(ours[tuple(key)] - v) for (_, *key), v in v_sp.items())
    t_sp *= n_pairs / len(pairs)
    name = f"Every row (1 x 2L x 2H x {tokens}T)"
    note = (
        f"scipy: {len(pairs)} pairs timed (graph built once), x{n_pairs / len(pairs):,.0f}; max|d| {d_sp:.0e}"
    )
    return [row(name, t_ours, "s", "scipy Dinic", t_sp, note)]


FIRST = """
import time
t0 = time.perf_counter()
import numpy as np
from attnflow.explain import attention_flow  # as user code imports it (not lazily inside the call)
rng = np.random.default_rng(0)
w = np.exp(rng.standard_normal((12, 12, 128, 128)) * 3.0)
w /= w.sum(-1, keepdims=True)
t1 = time.perf_counter()
attention_flow(w, sources=[0])
t2 = time.perf_counter()
warm = []
for _ in range(7):
    t = time.perf_counter(); attention_flow(w, sources=[0]); warm.append(time.perf_counter() - t)
print(t1 - t0, t2 - t1, sorted(warm)[3])
"""


def first_call(quick: bool) -> list[dict]:
    """A fresh interpreter: import + the first BERT-base-sized CLS flow, vs the same call warm."""
    runs = []
    for _ in range(1 if quick else 3):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True, check=True).stdout
        total = time.perf_counter() - start
        imp, first, warm = (float(x) for x in out.split())
        runs.append((total - 7 * warm, imp, first, warm))  # end to end up to the first result
    end, imp, first, warm = (statistics.median(v) for v in zip(*runs, strict=True))
    name = "First call in a fresh process (1 x 12L x 12H x 128T, CLS flow)"
    note = f"median of {len(runs)} processes; import + data {imp:.2f} s"
    return [
        row(
            f"{name}: the call",
            first,
            "s",
            "the same call, warm",
            warm,
            note,
            lambda o, r: 1 / r <= TARGETS["first_over_warm"],
        ),
        row(
            f"{name}: interpreter start to result",
            end,
            "s",
            "target",
            TARGETS["first_end_to_end_s"],
            note,
            lambda o, r: o <= TARGETS["first_end_to_end_s"],
        ),
    ]


SPIN = "while True:\n    pass\n"


def interleaved(rng, attn: np.ndarray, settings: tuple[str, ...], reps: int) -> tuple[dict, list[int]]:
    """Median ms of one-sample CLS calls per thread setting ("auto": attnflow chooses, else
    ATTNFLOW_THREADS), interleaved in a new order each round (the same contention for all), and the
    counts attnflow chose."""
    times, chosen, order = {k: [] for k in settings}, [], list(settings)
    lib.attention_flow(attn, sources=[0])
    for _ in range(reps):
        rng.shuffle(order)
        for setting in order:
            if setting == "auto":
                os.environ.pop("ATTNFLOW_THREADS", None)
                chosen.append(flow_threads())
            else:
                os.environ["ATTNFLOW_THREADS"] = setting
            start = time.perf_counter()
            lib.attention_flow(attn, sources=[0])
            times[setting].append(time.perf_counter() - start)
    os.environ.pop("ATTNFLOW_THREADS", None)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}, chosen


def busy(rng, quick: bool) -> list[dict]:
    """Two busy loops running: one-sample CLS calls, threads chosen by attnflow vs 1 and 2."""
    small = random_attention(rng, (6, 8, 20, 20))  # a Table-1 sample
    bert = random_attention(rng, (12, 12, 128, 128))
    loops = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    try:
        time.sleep(1.0)  # let the loops start spinning
        rows = []
        for label, attn, reps in (
            ("Table-1 sample (6L x 8H x 20T)", small, 200),
            ("12L x 12H x 128T", bert, 45),  # calls of ~80 ms, time-sliced with the loops: many
        ):
            reps = max(reps // 4, 3) if quick else reps
            med, chosen = interleaved(rng, attn, ("auto", "1", "2"), reps)
            note = (
                f"two busy loops; medians of {reps} interleaved calls; attnflow chose "
                f"{min(chosen)}-{max(chosen)} threads (mode {statistics.mode(chosen)}); 2 threads: {med['2']:.3g} ms"
            )
            # one thread chosen for every call: the very call timed as "1 thread", so the target
            # holds by construction and the two medians differ by the scheduler alone (calls of
            # ~80 ms time-sliced with the loops differ by +-20% between identical runs)
            same_call = set(chosen) == {1}
            if same_call:
                note += "; every call chose 1 thread, the 1-thread call itself"
            rows.append(
                row(
                    f"Busy machine, one call, {label}: threads chosen",
                    med["auto"],
                    "ms",
                    "1 thread",
                    med["1"],
                    note,
                    lambda o, r, same=same_call: same or r >= TARGETS["busy_over_single"] / BUSY_NOISE,
                )
            )
        return rows
    finally:
        for p in loops:
            p.kill()
            p.wait()


def idle_threads(rng, quick: bool) -> list[dict]:
    """The same one-sample calls without busy loops of ours (other work on the machine runs on): chosen count vs one thread."""
    small = random_attention(rng, (6, 8, 20, 20))
    bert = random_attention(rng, (12, 12, 128, 128))
    rows = []
    for label, attn, reps in (("Table-1 sample (6L x 8H x 20T)", small, 200), ("12L x 12H x 128T", bert, 15)):
        reps = max(reps // 4, 3) if quick else reps
        med, _ = interleaved(rng, attn, ("auto", "1"), reps)
        rows.append(
            row(
                f"No busy loops added, one call, {label}: threads chosen",
                med["auto"],
                "ms",
                "1 thread",
                med["1"],
                f"medians of {reps} interleaved calls",
            )
        )
    return rows


SECTIONS = {
    "table1": table1,
    "allpairs": allpairs,
    "long": long_sequence,
    "first": lambda rng, quick: first_call(quick),
    "idle": idle_threads,
    "busy": busy,
}


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average: {load()}"


def fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def write(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(path)  # atomic: never a half-written result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads and subsamples")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "flow_speed.json")
    args = parser.parse_args()
    names = args.only or list(SECTIONS)
    os.environ.pop("ATTNFLOW_THREADS", None)
    print(uptime(), flush=True)
    result = {
        "command": "python benchmarks/flow_speed.py"
        + (" --quick" if args.quick else "")
        + "".join(f" --only {n}" for n in args.only or []),
        "machine": platform.processor() or platform.machine(),
        "cpu": stage_cache.cpu_kind(),  # the ratios against scipy depend on it
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads_setting": "ATTNFLOW_THREADS unset: the CPUs free at each call",
        "scipy": scipy.__version__,
        "seed": SEED,
        "uptime_before": uptime(),
        "load_average_before": load(),
        "targets": TARGETS,
        "sections": {},
        "rows": [],
        "complete": False,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    warm = random_attention(np.random.default_rng(1), (4, 6, 8, 20, 20))
    lib.attention_flow(warm, sources=[0])  # the pool's threads exist before any timed call
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows = SECTIONS[name](rng, args.quick)
        result["sections"][name] = {
            "rows": rows,
            "load_average_after": load(),
            "finished": time.strftime("%H:%M:%S"),
        }
        result["rows"] += rows
        write(args.out, result)
    result["load_average_after"] = load()
    result["uptime_after"] = uptime()
    checks = [r for r in result["rows"] if r["met"] is not None]
    result["targets_met"] = all(r["met"] for r in checks)
    result["complete"] = True
    write(args.out, result)

    print(
        f"attention flow vs scipy {scipy.__version__} -- {result['cpu']}, {result['cpus']} CPUs "
        f"(affinity {result['affinity']}); {result['threads_setting']}"
    )
    print(f"before: {result['uptime_before']}\nafter:  {result['uptime_after']}\n")
    head = f"{'figure':<78} {'ours':>9} {'unit':<10} {'baseline':<20} {'baseline':>9} {'x faster':>9} {'target':>6}  note"
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        met = "" if r["met"] is None else ("ok" if r["met"] else "NO")
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.1f}"
        print(
            f"{r['figure']:<78} {fmt(r['ours']):>9} {r['unit']:<10} {r['baseline']:<20} {fmt(r['base']):>9} "
            f"{ratio:>9} {met:>6}  {r['note']}"
        )
    missed = [r["figure"] for r in checks if not r["met"]]
    print(f"\n  targets met: {len(checks) - len(missed)} of {len(checks)}")
    for figure in missed:
        print(f"  NOT met: {figure}")


if __name__ == "__main__":
    main()
