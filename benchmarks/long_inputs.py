"""Maps at the user's scale: peak memory and time of explaining long inputs, classic capture vs stream.

    python benchmarks/long_inputs.py --section speed      # raw and rollout, float32 torch vs float64 numpy, T = 2048
    python benchmarks/long_inputs.py --section depth      # tiny 32-head Llama, 768 tokens, 4 vs 16 layers
    python benchmarks/long_inputs.py --section smollm2    # SmolLM2-135M-Instruct at 512 ... 4,096 tokens
    python benchmarks/long_inputs.py --section smollm2 --lengths 4096 --paths stream
    python benchmarks/long_inputs.py --section gradients  # AttnLRP, Chefer, Grad-SAM vs a bare forward / input gradient
    python benchmarks/long_inputs.py --section gradients --lengths 2048 --paths input-grad,attnlrp
    python benchmarks/long_inputs.py                      # both; --lengths 512,1024 for fewer
    python benchmarks/long_inputs.py --device cuda        # the same on a GPU, when there is one

Two paths from a model to maps, each measured in a fresh process:

- classic: `attnflow.bridge.forward(model, batch, ["attentions"])` keeps (B, L, H, T, T) float32, then
  `raw_attention`, `attention_rollout`, `attention_flow` (float64 numpy);
- stream: `attnflow.stream.stream_maps`, heads mixed inside the forward, rollout accumulated
  layer by layer (float32 torch on the model's device), flow's capacities (L, T, T) float64.

Flow is the flow from the last token at the top layer ("last-row flow"); raw and rollout are the
last token's rows at every layer (stream-rr: raw and rollout alone). Chefer's generic rule and Grad-SAM of the predicted next token:
classic = the bridge's (B, L, H, T, T) attentions and gradients, then `chefer_generic` and
`grad_sam_map`; stream-grad = `attnflow.stream.stream_gradient_maps` (∇A reduced over heads in
the backward). AttnLRP (`attnflow.attnlrp.attnlrp`) of the last token's
predicted next token is measured on its own (it needs a backward). "Extra peak" is the largest
resident set during the call minus the resident set just before it (polled every 2 ms). A worker
whose resident set passes --cap-gb (8 by default) is stopped and reported as "over the cap".
Workers run with glibc's MALLOC_MMAP_THRESHOLD_ at 64 KiB, so freed blocks go back to the system
and the resident set follows live memory. The depth section measures a second call of the same size
(a process's first full-size call also pays one-time library buffers, whatever the method; kept in
the JSON as first_call_extra_peak_bytes); the SmolLM2 section the first, after a 16-token warm-up.
Writes benchmarks/results/long_inputs.json after each measurement (a late kill keeps the rest).

The gradients section (SmolLM2, one text, the last token's predicted next token) times each
gradient method beside the two things it cannot beat, each length and path in a fresh process:
forward = the model's forward with torch's fused attention, logits at the last position only;
input-grad = that forward on the word embeddings and one backward of the logit to them (a plain
input gradient); attnlrp = `attnflow.attnlrp.attnlrp(..., attention="sdpa")` (fused attention
forward and backward: what the maps of `explain_text` run); attnlrp-checkpoint = the eager
attention recomputed in the backward; attnlrp-eager = the eager attention with its
probabilities kept (the path before, which also reports R(A)); chefer / grad-sam =
`attnflow.stream.stream_gradient_maps` with one method, its attention recomputed in the backward;
grad-saved = both, with autograd saving every layer's probabilities (the path before). The
process peak is the worker's own ru_maxrss (model, libraries and all); "x input-grad" divides
by the input gradient's seconds at the same length in the same run; the CPU model and the load
average are printed with the table. The AttnLRP paths keep their input relevance in the JSON,
and the table gives each one's largest difference from attnlrp-eager at the same length
(relative to the largest |relevance|) where attnlrp-eager fits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from attnflow import stage_cache
from attnflow.resources import PAGE, Peak

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "long_inputs.json"
GRAD_RESULTS = ROOT / "benchmarks" / "results" / "long_gradients.json"  # the gradients section's own run
PLOT = ROOT / "docs" / "img" / "long_inputs.png"
LENGTHS = (512, 1024, 2048, 4096)
DEPTHS = (4, 16)
# every path of the SmolLM2 section: the head-mixed methods, the gradient methods (Chefer, Grad-SAM), AttnLRP
PATHS = ("classic", "stream", "stream-rr", "classic-grad", "stream-grad", "attnlrp")
# the gradients section (module docstring); attnlrp-eager and grad-saved (the paths before) only up
# to EAGER_MAX tokens unless asked for by --paths: past it they pass 8 GB
GRAD_PATHS = ("forward", "input-grad", "attnlrp", "attnlrp-checkpoint", "attnlrp-eager", "chefer", "grad-sam",
              "grad-saved")  # fmt: skip
EAGER_MAX = 1024
_ATTNLRP_ATTENTION = {"attnlrp": "sdpa", "attnlrp-checkpoint": "checkpoint", "attnlrp-eager": "eager"}
DEPTH_TOKENS, DEPTH_HEADS = 768, 32


def _tiny_llama(layers: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
        num_attention_heads=DEPTH_HEADS, num_key_value_heads=DEPTH_HEADS, max_position_embeddings=4096,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval(), torch.randint(0, 128, (1, DEPTH_TOKENS))


def _smollm2(tokens: int):
    import torch

    from attnflow.hf import load_model
    from attnflow.models.smollm2 import smollm2_dir

    model, tokenizer = load_model(str(smollm2_dir()))  # converted once from the packaged GGUF
    text = (ROOT / "README.md").read_text() * 8  # plenty of real text
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :tokens]
    assert ids.shape[1] == tokens, ids.shape
    return model, ids.to(torch.long)


def run(model, batch: dict, path: str, methods: tuple[str, ...]) -> dict:
    """The maps of the last token through one path (classic | stream | attnlrp)."""
    t, n_layers = batch["input_ids"].shape[1], model.config.num_hidden_layers
    if path == "classic":
        from attnflow.bridge import forward
        from attnflow.explain import attention_flow, attention_rollout, raw_attention

        attn = forward(model, batch, ("attentions",), target=None).attentions[0]  # (L, H, T, T)
        maps = {"rollout": attention_rollout(attn)[:, t - 1]}
        if "raw" in methods:
            maps["raw"] = raw_attention(attn)[:, t - 1]
        if "flow" in methods:
            maps["flow"] = attention_flow(attn, sources=[t - 1], layers=[n_layers - 1])
        return maps
    if path in ("stream", "stream-rr"):  # stream-rr: raw and rollout only
        from attnflow.stream import stream_maps

        chosen = tuple(m for m in methods if path == "stream" or m != "flow")
        return stream_maps(model, batch, [t - 1], chosen, flow_layers=[n_layers - 1])
    if path == "classic-grad":
        from attnflow.bridge import forward
        from attnflow.explain import chefer_generic
        from attnflow.methods.grad_sam import grad_sam_map

        cap = forward(model, batch, ("attentions", "attn_grad"), target="predicted")
        attn, grad = cap.attentions[0], cap.attention_grads[0]
        return {
            "chefer": chefer_generic(attn, grad)[:, t - 1],
            "grad_sam": grad_sam_map(attn, attn_grad=grad)[:, t - 1],
        }
    if path == "stream-grad":
        from attnflow.stream import stream_gradient_maps

        return stream_gradient_maps(model, batch, [t - 1])
    from attnflow.attnlrp import attnlrp

    return {"attnlrp": attnlrp(model, batch["input_ids"][0]).input_relevance}


def run_gradient(model, batch: dict, path: str) -> dict:
    """One path of the gradients section on the last token's predicted next token (module docstring)."""
    import torch

    ids = batch["input_ids"]
    last = torch.tensor([ids.shape[1] - 1], device=ids.device)
    if path == "forward":
        with torch.no_grad():
            return {"logits": model(**batch, logits_to_keep=last, use_cache=False).logits}
    if path == "input-grad":
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds, attention_mask=batch["attention_mask"], logits_to_keep=last,
                       use_cache=False).logits[0, -1]  # fmt: skip
        (grad,) = torch.autograd.grad(logits[int(logits.argmax())], embeds)
        return {"input_relevance": (embeds * grad).sum(-1)[0].detach()}
    if path in _ATTNLRP_ATTENTION:
        from attnflow.attnlrp import attnlrp

        res = attnlrp(model, ids[0], attention=_ATTNLRP_ATTENTION[path])
        return {"input_relevance": res.input_relevance}
    from attnflow.stream import stream_gradient_maps

    methods = {"chefer": ("chefer",), "grad-sam": ("grad_sam",), "grad-saved": ("chefer", "grad_sam")}[path]
    return stream_gradient_maps(model, batch, [ids.shape[1] - 1], methods, recompute=path != "grad-saved")


def worker(kind: str, size: int, path: str, device: str) -> dict:
    """One measurement in this process: path = classic | stream | attnlrp."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model, ids = _tiny_llama(size) if kind == "depth" else _smollm2(size)
    if kind == "gradients":
        return gradient_worker(model, ids, size, path, device)
    if path in ("attnlrp", "classic-grad"):
        model.set_attn_implementation("eager")  # AttnLRP rewrites the attention probabilities' gradient
    model.to(device)
    ids = ids.to(device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    t, n_layers = ids.shape[1], model.config.num_hidden_layers
    methods = ("rollout",) if kind == "depth" else ("raw", "rollout", "flow")
    run(model, {k: v[:, :16] for k, v in batch.items()}, path, methods)  # warm: libraries paged in
    first = None
    if kind == "depth":  # the first full-size call also pays one-time allocator and library buffers
        with Peak() as warm:
            run(model, batch, path, methods)
        first = warm.extra
    with Peak() as peak:
        run(model, batch, path, methods)
        if device == "cuda":
            torch.cuda.synchronize()
    attn_f32 = n_layers * model.config.num_attention_heads * t * t * 4
    out = {
        "kind": kind, "size": size, "path": path, "device": device, "tokens": t, "layers": n_layers,
        "heads": model.config.num_attention_heads, "seconds": peak.seconds, "extra_peak_bytes": peak.extra,
        "attentions_f32_bytes": attn_f32, "first_call_extra_peak_bytes": first,
    }  # fmt: skip
    if device == "cuda":
        out["cuda_peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def gradient_worker(model, ids, size: int, path: str, device: str) -> dict:
    """One measurement of the gradients section in this process (after a 16-token warm-up)."""
    import resource

    import torch

    # the bare paths and the stream run the fused kernels; AttnLRP sets its own; eager for the path before
    model.set_attn_implementation("eager" if path == "attnlrp-eager" else "sdpa")
    model.to(device)
    ids = ids.to(device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    run_gradient(model, {k: v[:, :16] for k, v in batch.items()}, path)  # warm: libraries paged in
    with Peak() as peak:
        got = run_gradient(model, batch, path)
        if device == "cuda":
            torch.cuda.synchronize()
    out = {
        "kind": "gradients", "size": size, "path": path, "device": device, "tokens": ids.shape[1],
        "seconds": peak.seconds, "extra_peak_bytes": peak.extra,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
        "threads": torch.get_num_threads(),
    }  # fmt: skip
    if "input_relevance" in got and path != "input-grad":
        out["input_relevance"] = got["input_relevance"].double().cpu().tolist()
    if device == "cuda":
        out["cuda_peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def gradient_table(rows: list[dict], meta: dict) -> str:
    """The gradients section as a markdown table: seconds, process peak (ru_maxrss), x input-grad,
    AttnLRP's largest relative difference from attnlrp-eager at the same length."""
    import numpy as np

    got = {(r["size"], r["path"]): r for r in rows if r["kind"] == "gradients"}
    lines = [
        f"`python benchmarks/long_inputs.py --section gradients`, {meta.get('cpu', 'unknown CPU')}, device "
        f"{meta.get('device', 'cpu')}, load average {_fmt_load(meta.get('load_before'))} before / "
        f"{_fmt_load(meta.get('load_after'))} after{_load_range(got.values())}; a worker past "
        f"{meta.get('cap_gb', 8):g} GB is stopped.",
        "",
        "| SmolLM2-135M, last token | tokens | seconds | x input-grad | process peak | vs attnlrp-eager |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path in GRAD_PATHS:
        for size in sorted({s for s, p in got if p == path}):
            r = got[(size, path)]
            if "over_cap_gb" in r:
                lines.append(f"| {path} | {size:,} | | | over {r['over_cap_gb']:g} GB | |")
                continue
            if "seconds" not in r:
                lines.append(f"| {path} | {size:,} | failed (exit {r.get('error')}) | | | |")
                continue
            base = got.get((size, "input-grad"), {})
            ratio = f"{r['seconds'] / base['seconds']:.2f}" if "seconds" in base else ""
            diff = ""
            ref = got.get((size, "attnlrp-eager"), {}).get("input_relevance")
            if ref is not None and "input_relevance" in r and path != "attnlrp-eager":
                a, b = np.asarray(r["input_relevance"]), np.asarray(ref)
                diff = f"{np.abs(a - b).max() / np.abs(b).max():.1e}"
            lines.append(
                f"| {path} | {size:,} | {r['seconds']:.1f} | {ratio} | {r['ru_maxrss_bytes'] / 2**30:.2f} GB | {diff} |"
            )
    return "\n".join(lines)


def _load_range(rows) -> str:
    """ ", 1-minute load average 6.1-9.9 after each worker" over the rows that recorded it."""
    loads = [r["load"][0] for r in rows if r.get("load")]
    return f", 1-minute load average {min(loads):.1f}-{max(loads):.1f} after each worker" if loads else ""


def _fmt_load(load) -> str:
    return "?" if load is None else " ".join(f"{x:.2f}" for x in load)


def watch(cmd: list[str], cap_gb: float, env: dict | None = None) -> tuple[str, int, int, bool]:
    """Run `cmd`, polling its resident set every 10 ms and killing it past cap_gb: (stdout, exit
    status, process peak in bytes, stopped over the cap)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    # every block above 64 KiB is mapped on its own and returned on free (no dynamic threshold), so
    # the resident set follows live memory in both paths instead of the allocator's retained heap
    env["MALLOC_MMAP_THRESHOLD_"] = str(64 * 1024)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    # read stdout while it runs: a worker's JSON can pass the pipe's 64 KiB and would block on it
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    peak, over = 0, False
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/statm") as fh:
                now = int(fh.read().split()[1]) * PAGE
        except OSError:
            now = 0
        peak = max(peak, now)
        if now > cap_gb * 2**30:
            proc.kill()
            over = True
        time.sleep(0.01)
    reader.join()
    return "".join(chunks), proc.returncode, peak, over


def run_worker(kind: str, size: int, path: str, device: str, cap_gb: float) -> dict:
    """`worker` in a fresh process, stopped when its resident set passes cap_gb."""
    cmd = [sys.executable, __file__, "--worker", kind, str(size), path, "--device", device]
    out, returncode, peak, over = watch(cmd, cap_gb)
    if over:
        return {"kind": kind, "size": size, "path": path, "device": device, "over_cap_gb": cap_gb}
    if returncode != 0:
        return {"kind": kind, "size": size, "path": path, "device": device, "error": returncode}
    result = json.loads(out.strip().splitlines()[-1])
    result["process_peak_bytes"] = peak
    return result


def _save(rows: list[dict], meta: dict, path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    tmp.replace(path)


def _line(r: dict) -> str:
    head = f"{r['kind']:<6} {r['size']:>5} {r['path']:<8}"
    if "over_cap_gb" in r:
        return f"{head} over the {r['over_cap_gb']:g} GB cap"
    if r["kind"] == "speed":
        return (
            f"{r['path']:<8} {tuple(r['shape'])}: numpy float64 {r['numpy_float64_s']:.3f} s, torch float32 "
            f"{r['torch_float32_s']:.3f} s: {r['speedup']:.2f}x (max |diff| {r['max_abs_diff']:.1e})"
        )
    if "error" in r:
        return f"{head} failed (exit {r['error']})"
    if r["kind"] == "gradients":
        return (
            f"{r['kind']:<9} {r['size']:>5} {r['path']:<18} {r['seconds']:8.2f} s  process peak (ru_maxrss) "
            f"{r['ru_maxrss_bytes'] / 2**30:.2f} GB  extra peak {r['extra_peak_bytes'] / 2**20:8.0f} MB"
        )
    ratio = r["extra_peak_bytes"] / r["attentions_f32_bytes"]
    return (
        f"{head} {r['seconds']:8.2f} s  extra peak {r['extra_peak_bytes'] / 2**20:8.0f} MB "
        f"({ratio:.2f}x the f32 [L,H,T,T])  process peak {r['process_peak_bytes'] / 2**30:.2f} GB"
    )


SPEED_SHAPE = (4, 4, 2048, 2048)  # [layer, head, query, key], float32: 256 MiB


def speed(repeats: int = 3) -> list[dict]:
    """raw and rollout of one float32 torch input: today's float64 numpy path (the same input as a
    numpy array) vs torch on the tensor's device, best of `repeats`, alternating, one process."""
    import numpy as np
    import torch

    from attnflow.explain import attention_rollout, raw_attention

    torch.manual_seed(0)
    attn = torch.softmax(3 * torch.randn(SPEED_SHAPE), dim=-1)
    rows = []
    for name, method in (("raw", raw_attention), ("rollout", attention_rollout)):
        best = {"numpy float64": np.inf, "torch float32": np.inf}
        for _ in range(repeats):
            for path, x in (("numpy float64", attn.numpy()), ("torch float32", attn)):
                t0 = time.perf_counter()
                out = method(x)
                best[path] = min(best[path], time.perf_counter() - t0)
        diff = float(np.abs(np.asarray(method(attn.numpy())) - out.double().numpy()).max())
        rows.append({"kind": "speed", "size": SPEED_SHAPE[-1], "path": name, "device": "cpu",
                     "numpy_float64_s": best["numpy float64"], "torch_float32_s": best["torch float32"],
                     "speedup": best["numpy float64"] / best["torch float32"], "max_abs_diff": diff,
                     "shape": list(SPEED_SHAPE), "threads": torch.get_num_threads()})  # fmt: skip
    return rows


def plot(rows: list[dict], out: Path) -> None:
    """Time and extra peak memory against the input length, SmolLM2, one line per path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = {
        "classic": ("o--", "classic capture: raw, rollout, flow"),
        "stream": ("o-", "stream: raw, rollout, flow"),
        "stream-rr": ("o:", "stream: raw, rollout"),
        "classic-grad": ("^--", "classic capture: Chefer, Grad-SAM"),
        "stream-grad": ("^-", "stream: Chefer, Grad-SAM"),
        "attnlrp": ("s:", "AttnLRP"),
    }
    for path, (style, label) in labels.items():
        got = sorted(
            (r["size"], r) for r in rows if r["kind"] == "smollm2" and r["path"] == path and "seconds" in r
        )
        if not got:
            continue
        n = [g[0] for g in got]
        ax_t.plot(n, [g[1]["seconds"] for g in got], style, label=label)
        ax_m.plot(n, [g[1]["extra_peak_bytes"] / 2**30 for g in got], style, label=label)
    for ax, what in ((ax_t, "seconds"), (ax_m, "extra peak memory (GB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    ax_m.axhline(8, color="grey", lw=0.8)
    ax_m.text(512, 8.5, "8 GB", color="grey", fontsize=8)
    ax_t.legend(fontsize=7)
    fig.suptitle("SmolLM2-135M-Instruct on the CPU: one explanation of the last token", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=("speed", "depth", "smollm2", "gradients", "all"), default="all")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--paths", default=None, help="of the SmolLM2 or gradients section (default: every path)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cap-gb", type=float, default=8.0)
    ap.add_argument("--worker", nargs=3, metavar=("KIND", "SIZE", "PATH"))
    ap.add_argument("--plot", action="store_true", help="only draw docs/img/long_inputs.png from the results")
    args = ap.parse_args()
    if args.plot:
        plot(json.loads(RESULTS.read_text())["rows"], PLOT)
        return
    if args.worker:
        kind, size, path = args.worker
        print(json.dumps(worker(kind, int(size), path, args.device)))
        return
    cpu = f"{stage_cache.cpu_kind()}, {len(os.sched_getaffinity(0))} CPUs"
    meta = {"load_before": os.getloadavg(), "device": args.device, "cap_gb": args.cap_gb, "cpu": cpu}
    results = GRAD_RESULTS if args.section == "gradients" else RESULTS
    rows: list[dict] = json.loads(results.read_text())["rows"] if results.exists() else []
    print(f"{meta['cpu']}; load average {meta['load_before']}")
    if args.section in ("speed", "all"):
        for r in speed():
            r["load"] = os.getloadavg()
            rows = [x for x in rows if (x["kind"], x["path"]) != ("speed", r["path"])]
            rows.append(r)
            print(_line(r), flush=True)
        _save(rows, meta)
    todo = []
    if args.section in ("depth", "all"):
        todo += [("depth", d, p) for d in DEPTHS for p in ("classic", "stream")]
    if args.section == "gradients":
        asked = GRAD_PATHS if args.paths is None else tuple(args.paths.split(","))
        if unknown := sorted(set(asked) - set(GRAD_PATHS)):
            ap.error(
                f"--paths: unknown {', '.join(unknown)}; the gradients paths are {', '.join(GRAD_PATHS)}"
            )
        before = ("attnlrp-eager", "grad-saved")  # the paths before: past EAGER_MAX only when asked for
        todo += [
            ("gradients", n, p)
            for n in map(int, args.lengths.split(","))
            for p in asked
            if args.paths is not None or p not in before or n <= EAGER_MAX
        ]
    if args.section in ("smollm2", "all"):
        paths = (args.paths or ",".join(PATHS)).split(",")
        if unknown := sorted(set(paths) - set(PATHS)):
            ap.error(f"--paths: unknown {', '.join(unknown)}; the paths are {', '.join(PATHS)}")
        todo += [("smollm2", n, p) for n in map(int, args.lengths.split(",")) for p in paths]
    for kind, size, path in todo:
        r = run_worker(kind, size, path, args.device, args.cap_gb)
        r["load"] = os.getloadavg()
        rows = [
            x
            for x in rows
            if (x["kind"], x["size"], x["path"], x["device"]) != (kind, size, path, args.device)
        ]
        rows.append(r)
        _save(rows, meta, results)
        print(_line(r), flush=True)
    meta["load_after"] = os.getloadavg()
    _save(rows, meta, results)
    print(f"load average {meta['load_after']}")
    if args.section == "gradients":
        print(gradient_table(rows, meta))
        return
    plot(rows, PLOT)


if __name__ == "__main__":
    main()
