"""Does the agreement training give the same bits whatever kernels the CPU runs? Measured here.

    python scripts/determinism.py                     # -> reports/machines/determinism-<capability>.json
    python scripts/determinism.py --out f.json --train-items 512 --epochs 4

Trains the study's agreement student with its LSTM teacher (the configured recipe of params.yaml:
``task.agreement.model`` / ``.train``, dropout and distillation included, ``trainer.num_threads``,
seed 0) through :func:`attnflow.lit.train_task` on a seeded subset of the prepared training items
for a few epochs, once per setting, each in a fresh process (the pins are read when torch loads):

    dtype  float32 (Lightning "32-true") | float64 ("64-true": weights, activations, optimizer)
  × pin    native    the CPU's own kernels
           avx2      ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
           baseline  ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41

Per setting the JSON records the sha256 of the weights after the last step (student and teacher,
:func:`state_digest`) and of the same weights rounded to float32, the loss of every step, the
largest |weight difference| and the first step whose loss differs against the native setting of
the same dtype, and the wall time of the training. A session on another CPU kind runs the same
command: equal digests in two machines' files mean bit-identical weights on both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASK = "agreement"
MACHINES = "machines"  # below the reports folder; the report's Machines section reads it too
DTYPES = {"float32": "32-true", "float64": "64-true"}  # dtype -> Lightning precision
NATIVE = "native"
PINS: dict[str, dict[str, str]] = {
    NATIVE: {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
# read by torch, MKL or oneDNN when they load: cleared for every setting, then the pin's set
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
                 "DNNL_MAX_CPU_ISA")  # fmt: skip
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # training runs on 1 thread anyway
SPLITS = ("train", "val", "test", "attractors")
RESULT, WEIGHTS = "result.json", "final.safetensors"  # what a worker leaves in its folder


def state_digest(state: Mapping[str, Any], *, as_float32: bool = False) -> str:
    """sha256 over the tensors of ``state`` in name order: ``name \\0 dtype \\0 shape \\0 bytes``.

    ``as_float32``: of the floating tensors rounded to float32 first (float64 weights whose
    differences are below float32's resolution then hash alike).

    >>> import torch
    >>> a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5])}
    >>> state_digest(a) == state_digest(dict(reversed(a.items())))
    True
    >>> state_digest({"w": torch.tensor([1.0], dtype=torch.float64)}, as_float32=True) == state_digest(
    ...     {"w": torch.tensor([1.0])})
    True
    """
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu()
        if as_float32 and t.is_floating_point():
            t = t.float()
        t = t.contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def max_abs_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """max over every tensor and element of |a − b| in float64; the names must be the same.

    >>> import torch
    >>> max_abs_diff({"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([1.0, 2.5])})
    0.5
    """
    if set(a) != set(b):
        raise ValueError(f"different tensors: {sorted(set(a) ^ set(b))}")
    return max((float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel()), default=0.0)


def first_difference(values: Sequence[float], reference: Sequence[float]) -> int | None:
    """The first index where two sequences differ (a length difference counts at the shorter's end);
    None when equal.

    >>> first_difference([1.0, 2.0, 3.0], [1.0, 2.5, 3.0]), first_difference([1.0], [1.0]), first_difference([1.0], [])
    (1, None, 0)
    """
    for i, (x, y) in enumerate(zip(values, reference, strict=False)):
        if x != y:
            return i
    return None if len(values) == len(reference) else min(len(values), len(reference))


def setting_env(pin: str, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without any ISA variable, on one thread, with ``pin``'s variables.

    >>> env = setting_env("avx2", {"PATH": "/bin", "MKL_CBWR": "AUTO"})
    >>> env["MKL_CBWR"], env["ATEN_CPU_CAPABILITY"], env["PATH"]
    ('AVX2', 'avx2', '/bin')
    >>> "MKL_CBWR" in setting_env(NATIVE, {"MKL_CBWR": "AUTO"})
    False
    """
    env = {k: v for k, v in base.items() if k not in ISA_VARIABLES}
    return {**env, **SINGLE_THREAD, **PINS[pin]}


def small_prepared(source: Path, target: Path, *, train_items: int, eval_items: int, seed: int) -> Path:
    """A prepared folder like ``source`` with a seeded subset of ``train_items`` training rows and
    ``eval_items`` rows of every other split (the vocabulary unchanged): a training of seconds
    whose evaluation after the fit does not take minutes (the attractor split has 64k rows)."""
    from attnflow.data.subsets import seeded_subset
    from attnflow.io import read_parquet, write_parquet

    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "vocab.json", target / "vocab.json")
    for split in SPLITS:
        rows = read_parquet(source / f"{split}.parquet")
        keep = seeded_subset(len(rows), train_items if split == "train" else eval_items, seed)
        write_parquet(target / f"{split}.parquet", rows.iloc[keep].reset_index(drop=True))
    return target


def prepared_folder() -> tuple[Path, dict[str, Any]]:
    """The prepared agreement data named by params.yaml, and the study config."""
    from attnflow.paths import StudyPaths
    from pipelines import _config

    cfg = _config.to_dict(_config.load(ROOT / "params.yaml"))
    return StudyPaths.from_config(cfg["paths"], root=ROOT).prepared_data(TASK), cfg


def _worker(args: argparse.Namespace) -> None:
    """One setting, in this process: train, then leave ``result.json`` and the weights in ``--work``."""
    import pytorch_lightning as pl
    import torch
    from safetensors.torch import save_file

    from attnflow.lit import train_task

    class _Steps(pl.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.state: dict[str, torch.Tensor] = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.losses.append(float((outputs["loss"] if isinstance(outputs, dict) else outputs).detach()))

        def on_train_end(self, trainer, pl_module) -> None:  # before train_task loads best.ckpt
            self.state = {k: v.detach().cpu().clone().contiguous() for k, v in pl_module.state_dict().items()}

    _, cfg = prepared_folder()
    work = Path(args.work)
    steps = _Steps()
    trainer = {**cfg["trainer"], "accelerator": "cpu", "devices": 1, "device": "cpu",
               "precision": DTYPES[args.worker], "progress_bar": False}  # fmt: skip
    train = {**cfg["task"][TASK]["train"], "max_epochs": args.epochs, "resume": False}
    start, cpu = time.perf_counter(), time.process_time()
    train_task(TASK, data_dir=args.data, out_dir=work / "model", model_cfg=cfg["task"][TASK]["model"],
               train_cfg=train, trainer_cfg=trainer, seed=args.seed, callbacks=[steps])  # fmt: skip
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    save_file(steps.state, str(work / WEIGHTS))
    result = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": cfg["trainer"]["num_threads"],
        "steps": len(steps.losses),
        "digest": state_digest(steps.state),
        "digest_float32": state_digest(steps.state, as_float32=True),
        "losses": steps.losses,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # this process's CPU time: the cost, whatever else the machine runs
    }
    (work / RESULT).write_text(json.dumps(result), encoding="utf-8")


def run_setting(dtype: str, pin: str, *, data: Path, work: Path, epochs: int, seed: int) -> dict[str, Any]:
    """One setting in a fresh process (the pins act when torch loads); its result and weights path."""
    work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", dtype, "--data", str(data),
               "--work", str(work), "--epochs", str(epochs), "--seed", str(seed)]  # fmt: skip
    print(f"[determinism] {dtype} {pin} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, env=setting_env(pin, os.environ), cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"setting {dtype}/{pin} failed:\n{done.stderr[-3000:]}")
    result = json.loads((work / RESULT).read_text(encoding="utf-8"))
    return {"dtype": dtype, "pin": pin, "env": PINS[pin], **result}


def compare(settings: list[dict[str, Any]], weights: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Add to each setting, against the native setting of its dtype: ``max_abs_diff`` of the
    weights, ``first_loss_difference`` (step index, None: every loss equal) and
    ``same_digest`` / ``same_digest_float32``."""
    native = {s["dtype"]: s for s in settings if s["pin"] == NATIVE}
    for s in settings:
        ref = native.get(s["dtype"])
        if ref is None:
            continue
        s["max_abs_diff"] = max_abs_diff(weights[(s["dtype"], s["pin"])], weights[(s["dtype"], NATIVE)])
        s["first_loss_difference"] = first_difference(s["losses"], ref["losses"])
        s["same_digest"] = s["digest"] == ref["digest"]
        s["same_digest_float32"] = s["digest_float32"] == ref["digest_float32"]


def _cost(s: Mapping[str, Any]) -> float:
    """A setting's cost: its CPU seconds (its own process, whatever else the machine ran), else wall."""
    return float(s.get("cpu_s") or s["wall_s"])


def answer(settings: list[dict[str, Any]]) -> dict[str, Any]:
    """Per dtype: whether every pin gave the native digest (and after rounding to float32), the
    largest weight difference, each pin's cost over the native one's; and float64's cost over
    float32's (native kernels). Cost: :func:`_cost`.

    >>> s = [dict(dtype="float32", pin="native", digest="a", digest_float32="a", wall_s=9.0, cpu_s=2.0),
    ...      dict(dtype="float32", pin="avx2", digest="b", digest_float32="b", wall_s=9.0, cpu_s=3.0, max_abs_diff=1e-7),
    ...      dict(dtype="float64", pin="native", digest="c", digest_float32="d", wall_s=9.0, cpu_s=5.0),
    ...      dict(dtype="float64", pin="avx2", digest="e", digest_float32="d", wall_s=9.0, cpu_s=5.0, max_abs_diff=1e-16)]
    >>> a = answer(s)
    >>> a["float32"]["identical_across_pins"], a["float64"]["identical_float32_rounded"], a["float64_cost_ratio"]
    (False, True, 2.5)
    >>> a["float32"]["cost_ratio"]
    {'native': 1.0, 'avx2': 1.5}
    """
    out: dict[str, Any] = {}
    for dtype in DTYPES:
        rows = [s for s in settings if s["dtype"] == dtype]
        if not rows:
            continue
        native = next((s for s in rows if s["pin"] == NATIVE), rows[0])
        out[dtype] = {
            "identical_across_pins": len({s["digest"] for s in rows}) == 1,
            "identical_float32_rounded": len({s["digest_float32"] for s in rows}) == 1,
            "max_abs_diff": max((s.get("max_abs_diff", 0.0) for s in rows), default=0.0),
            "native_cost_s": _cost(native),
            "cost_ratio": {s["pin"]: round(_cost(s) / _cost(native), 2) for s in rows},
        }
    if "float32" in out and "float64" in out:
        out["float64_cost_ratio"] = round(
            out["float64"]["native_cost_s"] / out["float32"]["native_cost_s"], 2
        )
    return out


def default_out(capability: str) -> Path:
    """``reports/machines/determinism-<capability>.json`` (capability lower case, e.g. ``avx512``)."""
    return ROOT / "reports" / MACHINES / f"determinism-{capability.lower()}.json"


def measure(args: argparse.Namespace) -> Path:
    import torch
    from safetensors.torch import load_file

    from attnflow import stage_cache
    from attnflow.io import write_json

    source, cfg = prepared_folder()
    if not (source / "train.parquet").is_file():
        raise SystemExit(f"no prepared data in {source}: make it with `dvc repro prepare@{TASK}`")
    dtypes, pins = args.dtypes or list(DTYPES), args.pins or list(PINS)
    settings, weights = [], {}
    with tempfile.TemporaryDirectory(prefix="determinism-") as tmp:
        data = small_prepared(source, Path(tmp) / "data", train_items=args.train_items,
                              eval_items=args.eval_items, seed=args.seed)  # fmt: skip
        for dtype in dtypes:
            for pin in pins:
                work = Path(tmp) / f"{dtype}-{pin}"
                settings.append(
                    run_setting(dtype, pin, data=data, work=work, epochs=args.epochs, seed=args.seed)
                )
                weights[(dtype, pin)] = load_file(str(work / WEIGHTS))
    compare(settings, weights)
    payload = {
        "machine": stage_cache.machine(),
        "recipe": {
            "task": TASK,
            "train_items": args.train_items,
            "eval_items": args.eval_items,
            "epochs": args.epochs,
            "batch_size": cfg["task"][TASK]["train"]["batch_size"],
            "seed": args.seed,
            "threads": cfg["trainer"]["num_threads"],
            "teacher": cfg["task"][TASK]["train"]["teacher"],
        },
        "command": " ".join(["python scripts/determinism.py", *args.argv]),
        "settings": settings,
        "answer": answer(settings),
    }
    out = Path(args.out) if args.out else default_out(torch.backends.cpu.get_cpu_capability())
    write_json(out, payload)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", help="the JSON to write (default reports/machines/determinism-<capability>.json)"
    )
    parser.add_argument("--train-items", type=int, default=512, help="training rows (seeded subset)")
    parser.add_argument("--eval-items", type=int, default=100, help="rows of each other split")
    parser.add_argument("--epochs", type=int, default=4, help="epochs over the training rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), help="default: all")
    parser.add_argument("--pins", nargs="+", choices=list(PINS), help="default: all")
    parser.add_argument("--worker", choices=list(DTYPES), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    args.argv = argv
    print(measure(args))


if __name__ == "__main__":
    main()
