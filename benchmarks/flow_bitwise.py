"""The compiled max-flow kernels give the former numba kernels' values bit for bit; or a
revision's build gives the working tree's values bit for bit.

    python benchmarks/flow_bitwise.py --old /tmp/numba_ref           # ~15 min on 2 busy cores
    python benchmarks/flow_bitwise.py --old /tmp/numba_ref --quick
    python benchmarks/flow_bitwise.py --ref-rev f826a27^             # a compiled revision vs now
    python benchmarks/flow_bitwise.py --ref-rev f826a27^ --quick

--old is a folder holding the numba solver as the package `numba_maxflow`: src/attnflow/explain/_maxflow
as of commit b7ec204 (the last with numba; numba must be installed), e.g.
`mkdir -p DIR && git archive b7ec204 src/attnflow/explain/_maxflow | tar -x -C DIR --strip-components=3
&& mv DIR/_maxflow DIR/numba_maxflow`. Both solvers get the same inputs through `layered_max_flow`: random attention
graphs of many shapes (1-12 layers, 1-70 tokens, padded batches, CLS rows, every row, random row
subsets, head rows; sharp, flat, with exact zeros and ties), then real-shaped ones: Table-1 CLS
flow (100 x 6 layers x 20 tokens), all pairs at 12 x 12 x 128, every row at 2 x 2048. The new one
runs with 1, 2 and 3 threads. Prints the largest absolute difference (must be 0.0) and writes
benchmarks/results/flow_bitwise.json.

--ref-rev REV compares two builds of the compiled kernels: REV's attnflow is built with its own
C++ sources into benchmarks/.cache/site/<commit> (`_gitref.build_at`: `git archive REV src/attnflow
src/cpp CMakeLists.txt pyproject.toml ...` + `pip install --no-deps --target`), and the same battery
(`battery`) runs in one subprocess per side -- REV's build, then the installed attnflow of the
working tree (its kernels as last built: after editing src/cpp, `pip install -e .` first) -- since
pybind11 refuses to load two builds of one module in a process. The battery:
`layered_max_flow` on the random cases above (1, 2 and 3 threads) and the real-shaped ones (1 and
2 threads), then `attention_flow` end to end (its fast path for float64 numpy without padding):
Table-1 CLS flow (100 x 6 layers x 8 heads x 20 tokens, batched and one sample at a time), CLS
flow of 12 x 12 x 128, every row of a BERT-shaped 12 x 12 x 48, last-row flow of 30 x 3 x 64 and 150
random calls (shapes, sources, layers, normalize, residual). Each side saves its arrays to an
.npz; they are compared bit for bit (dtype, shape, bytes). Prints the arrays and values compared,
the arrays that differ, the largest absolute difference and each side's time (same run), and writes
benchmarks/results/flow_bitwise_rev.json after each side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REV_RESULTS = ROOT / "benchmarks" / "results" / "flow_bitwise_rev.json"


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


def _stochastic(rng, shape, sharpness):
    x = np.exp(rng.standard_normal(shape) * sharpness)
    return x / x.sum(-1, keepdims=True)


def battery(out: Path, cases: int, quick: bool) -> int:
    """Every value of the battery against the attnflow this process imports, saved to `out` (.npz)."""
    from attnflow.explain import _maxflow as mf
    from attnflow.explain import flow

    res = {}
    rng = np.random.default_rng(12345)
    for i in range(cases):
        case = random_case(rng)
        for threads in (1, 2, 3):
            res[f"random{i}_t{threads}"] = mf.layered_max_flow(*case, progress=False, threads=threads)
    for name, case in real_cases(quick):
        for threads in (1, 2):
            res[f"{name}_t{threads}"] = mf.layered_max_flow(*case, progress=False, threads=threads)
    rng = np.random.default_rng(99)
    calls = [
        (_stochastic(rng, (100, 6, 8, 20, 20), 3.0), {"sources": [0], "normalize": False}),  # Table 1, CLS
        (_stochastic(rng, (12, 12, 128, 128), 3.0), {"sources": 0}),
        (_stochastic(rng, (1, 12, 12, 48, 48), 3.0), {}),  # every row
        (_stochastic(rng, (30, 3, 64, 64), 3.0), {"sources": [63], "layers": [29]}),  # last-row flow
    ]
    options = [{}, {"sources": [0]}, {"sources": 0, "layers": "top"}, {"normalize": False, "residual": 0.3}]
    for i in range(150):
        b, n_layers, heads, tokens = (int(rng.integers(1, high)) for high in (4, 8, 6, 30))
        kw = dict(options[i % 4])
        if kw.get("layers") == "top":
            kw["layers"] = [n_layers - 1]
        sharpness = float(rng.choice([0.5, 3, 8]))
        calls.append((_stochastic(rng, (b, n_layers, heads, tokens, tokens), sharpness), kw))
    for i, (attn, kw) in enumerate(calls):
        res[f"af{i}"] = flow.attention_flow(attn, progress=False, **kw)
    table1, kw = calls[0]
    for k in range(len(table1)):  # Table 1 one sample at a time (the one-call fast path)
        res[f"af0_one{k}"] = flow.attention_flow(table1[k], progress=False, **kw)
    np.savez(out, **res)
    return len(res)


def compare_revision(rev: str, cases: int, quick: bool) -> None:
    """`battery` at `rev`'s build and at the installed attnflow, each in its own process; bit for bit."""
    from _gitref import build_at, commit_of

    commit = commit_of(rev)
    t = time.perf_counter()
    site = build_at(rev)
    print(f"{rev} = {commit[:12]}: built in {time.perf_counter() - t:.0f} s ({site})", flush=True)
    report = {"meta": {"ref_rev": rev, "ref_commit": commit, "cases": cases, "quick": quick,
                       "load_before": os.getloadavg()}}  # fmt: skip
    print(f"load average {report['meta']['load_before']}", flush=True)
    arrays = {}
    with tempfile.TemporaryDirectory(prefix="flow_bitwise_") as tmp:
        for side, where in (("ref", site), ("now", None)):
            out = Path(tmp) / f"{side}.npz"
            cmd = [sys.executable, __file__, "--battery", str(out), "--cases", str(cases)]
            cmd += ["--quick"] if quick else []
            cmd += ["--site", str(where)] if where is not None else []
            t = time.perf_counter()
            subprocess.run(cmd, check=True)
            seconds = time.perf_counter() - t
            with np.load(out) as z:
                arrays[side] = {k: z[k] for k in z.files}
            report[side] = {"arrays": len(arrays[side]), "seconds": seconds, "load": os.getloadavg()}
            print(f"{side}: {len(arrays[side])} arrays in {seconds:.1f} s", flush=True)
            _save_rev(report)
    ref, now = arrays["ref"], arrays["now"]
    differ = [k for k in ref if k not in now or not _same_bits(ref[k], now[k])]
    diffs = [
        float(np.abs(ref[k] - now[k]).max(initial=0.0))
        for k in ref
        if k in now and ref[k].shape == now[k].shape
    ]
    report["summary"] = {
        "arrays": len(ref), "values": int(sum(v.size for v in ref.values())), "differ": len(differ),
        "only_now": sorted(set(now) - set(ref)), "max_abs_diff": max(diffs, default=0.0),
        "ref_over_now_seconds": report["ref"]["seconds"] / report["now"]["seconds"],
        "first_differing": differ[:20],
    }  # fmt: skip
    report["meta"]["load_after"] = os.getloadavg()
    _save_rev(report)
    s = report["summary"]
    print(f"{s['arrays']} arrays, {s['values']} values: {s['differ']} differ in any bit "
          f"(max abs diff {s['max_abs_diff']!r}); time ref / now {s['ref_over_now_seconds']:.2f}x")  # fmt: skip
    for k in differ[:20]:
        print(f"  differs: {k}")
    print(f"load average {report['meta']['load_after']}; wrote {REV_RESULTS.relative_to(ROOT)}")


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (the sign of zero included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _save_rev(report: dict) -> None:
    REV_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = REV_RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(REV_RESULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    against = parser.add_mutually_exclusive_group(required=True)
    against.add_argument("--old", help="folder holding the numba solver as `numba_maxflow`")
    against.add_argument(
        "--ref-rev", help="a git revision with the compiled kernels, built and compared with now"
    )
    against.add_argument("--battery", type=Path, help=argparse.SUPPRESS)  # internal: one side's .npz
    parser.add_argument("--site", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, help="random solver calls (default 300, --quick 40)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_cases = args.cases if args.cases is not None else 40 if args.quick else 300
    if args.battery:
        if args.site is not None:
            from _gitref import use_site

            use_site(args.site)
        print(f"  {battery(args.battery, n_cases, args.quick)} arrays", flush=True)
        return
    if args.ref_rev:
        from _gitref import unknown_ref

        if error := unknown_ref(args.ref_rev):
            parser.error(error)
        compare_revision(args.ref_rev, n_cases, args.quick)
        return
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
