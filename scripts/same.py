"""Do the numbers move? One command, three questions, each against a git revision.

    python scripts/same.py numbers                      # capture, maps, relevance: HEAD vs the working tree
    python scripts/same.py numbers --base b7ec204 --new HEAD --keep /tmp/numbers
    python scripts/same.py stages --base af3f8bc        # the stage outputs the base's code would write
    python scripts/same.py tables --base c5222a7        # the committed tables, row for row

numbers: each side is built on its own: the base revision is checked out with ``git worktree add``
into a temporary folder (removed afterwards; the working tree is copied there as git sees it:
tracked and untracked files that are not ignored), installed with its compiled max-flow kernels by
``pip install --no-deps --target`` (its own CMakeLists.txt and C++ sources), and the same battery
runs in a subprocess that imports that copy of attnflow (the editable install's redirect is switched
off there). Both sides get the same inputs: tiny models with fixed seeds, built once here (a
BERT-like classifier, also wrapped as the study's SST-2 model is, GPT-2 and Llama from configs,
saved with save_pretrained) and the study's agreement encoder (AgreementTransformer, seeded); and,
when present, the study's trained models on their samples (``models/<task>/model`` and
``data/prepared/<task>``: the capture stage's settings, the first ``--study-samples`` samples).
The battery (`battery`): the capture (attentions, outputs, attention gradients and LRP relevance
through `attnflow.bridge.forward`; `attnflow.capture.capture` for the study encoder), every
attention method of the records on the whole padded batch and through `attnflow.explain.apply`
(the explained rows; the authors' CLS conventions; on the decoders every sinks x receptive-field
option), the per-head variants, and AttnLRP's relevance on the decoders. Prints one line per
method and exits 1 when an array of the base differs in any bit (dtype, shape or value) or is
missing from the new side; an array the base could not compute (a new option) is listed as new.

stages: would the code of ``--base`` have written the same files as ``outputs/<stage>/<task>/``
here (from ``dvc repro`` of the current code)? The trained models, the prepared data and the config
are held fixed (the base's own ``conf/``, this checkout's ``models/`` and ``data/``), so a difference
can only come from code. Every array of every .safetensors file and every .parquet table the base
wrote is compared; exit 1 when anything differs or is missing here (~6 min on 2 cores).

tables: the correlation tables of each task (configured all-heads rows -- Tables 1-3 --, the
sensitivity variants and the per-head rows apart), the faithfulness and method-agreement tables and
the sweep's tables, from the working tree and from ``git show <base>:<path>``: rows, equal bit for
bit, and else the largest difference of a mean. Exit 0.

Exit 2 when a side could not be built or run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
ERRORS = "errors.json"  # beside each side's arrays: key -> the message of what raised
STAGES = ("capture", "explain")
TASKS = ("agreement", "sst2")


# --------------------------------------------------------------------------------------------------
# Comparison (pure: tested in tests/unit/test_same.py)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One method's arrays, compared."""

    method: str
    arrays: int  # compared on both sides
    max_abs_diff: float  # over the arrays of equal shape (inf: a shape or dtype differs)
    differ: int  # arrays that are not bit-identical
    lost: int  # computed by the base, missing or refused on the new side
    new: int  # computed on the new side only (the base refused it or had no such array)

    @property
    def identical(self) -> bool:
        return self.differ == 0 and self.lost == 0


def group_of(key: str) -> str:
    """The method an array belongs to: keys read ``<group>/<model>/...``."""
    return key.split("/", 1)[0]


def bit_identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads and the sign of zero included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return float("inf")
    if a.size == 0:
        return 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64))  # NaN on both sides: no difference
    return float(np.nan_to_num(d, nan=np.inf).max())


def compare(base: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray]) -> list[Row]:
    """Per method: the arrays of both sides compared bit for bit. An array in `base` absent from
    `new` is lost; one in `new` only (the base refused it, or had no such option) is new."""
    groups = sorted({group_of(k) for k in [*base, *new]})
    rows = []
    for g in groups:
        keys_b = {k for k in base if group_of(k) == g}
        keys_n = {k for k in new if group_of(k) == g}
        both = sorted(keys_b & keys_n)
        diffs = [max_abs_diff(base[k], new[k]) for k in both]
        differ = sum(not bit_identical(base[k], new[k]) for k in both)
        rows.append(
            Row(g, len(both), max(diffs, default=0.0), differ, len(keys_b - keys_n), len(keys_n - keys_b))
        )
    return rows


def table(rows: list[Row]) -> str:
    """The comparison as a fixed-width table."""
    head = f"{'method':<14} {'arrays':>7} {'max abs diff':>13}  identical?"
    lines = [head, "-" * len(head)]
    for r in rows:
        note = "yes" if r.identical else "NO"
        extra = [f"{r.differ} differ" if r.differ else "", f"{r.lost} lost" if r.lost else "",
                 f"{r.new} new" if r.new else ""]  # fmt: skip
        if any(extra):
            note += " (" + ", ".join(e for e in extra if e) + ")"
        lines.append(f"{r.method:<14} {r.arrays:>7} {r.max_abs_diff:>13.3g}  {note}")
    return "\n".join(lines)


def differences(base: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray], limit: int = 20) -> list[str]:
    """The keys that are not bit-identical or lost, with their difference (the first `limit`)."""
    out = []
    for k in sorted(base):
        if k not in new:
            out.append(f"{k}: missing on the new side")
        elif not bit_identical(base[k], new[k]):
            a, b = base[k], new[k]
            out.append(
                f"{k}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}, max abs diff {max_abs_diff(a, b):.3g}"
            )
    return out[:limit]


# --------------------------------------------------------------------------------------------------
# The battery (runs inside one side's subprocess, against that side's attnflow)
# --------------------------------------------------------------------------------------------------


class _Arrays:
    """Collects named arrays; a step that raises is recorded by its message instead."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.errors: dict[str, str] = {}

    def put(self, key: str, value: Any) -> None:
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        self.arrays[key] = np.ascontiguousarray(np.asarray(value))

    def step(self, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # a refusal on this side: compared by its presence
            self.errors[key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            return None


def _records() -> list[Any]:
    from attnflow.methods import METHODS

    return [r for r in METHODS.values() if r.kind == "attention"]


def _maps(out: _Arrays, model: str, attn: np.ndarray, valid: np.ndarray, inputs: dict[str, np.ndarray],
          *, causal: bool, row: str | int = "auto") -> None:  # fmt: skip
    """Every attention method on (B, L, H, T, T) float64 attention with its needs; `row`: the
    explained row (the study's task setting for its trained models)."""
    from attnflow.explain.apply import CausalSpec, RowSpec, apply

    records = _records()
    lengths = valid.sum(axis=1)
    for r in records:
        needs = {k: inputs[k] for k in r.needs if k in inputs}
        if len(needs) < len(r.needs):
            continue  # this model gave no such need (e.g. no LRP for it): nothing to compare
        key = f"{r.name}/{model}"
        got = out.step(f"{key}/all_rows", lambda r=r, needs=needs: r.function(attn, mask=valid, **needs))
        if got is not None:
            out.put(f"{key}/all_rows", got)
        if r.per_head is not None:
            got = out.step(f"{key}/per_head", lambda r=r: r.per_head(
                attn, sources=[0], heads="mean", residual=0.5, lengths=lengths))  # fmt: skip
            if got is not None:
                out.put(f"{key}/per_head", got)
    usable = [r for r in records if set(r.needs) <= set(inputs)]
    rows = RowSpec(row, causal=causal, task=True)  # a record's own row (classification: CLS)
    specs = {"plain": CausalSpec()}
    if causal:
        for sinks in ("none", "drop", "diagonal"):
            for field in ("none", "uniform", "column"):
                if (sinks, field) != ("none", "none"):
                    specs[f"sinks={sinks},rf={field}"] = CausalSpec(sinks, [0], field)
    options = {r.name: {"cls_self": r.authors_cls_self} for r in usable if "cls_self" in r.options}
    for label, spec in specs.items():
        for r in usable:  # one record at a time: a refusal of one leaves the others compared
            for tag, opts in (("", {}), ("/authors_cls_self", options)) if r.name in options else (("", {}),):
                key = f"{r.name}/{model}/rows/{label}{tag}"
                got = out.step(key, lambda r=r, spec=spec, opts=opts: apply(
                    [r], attn, inputs, rows, spec, valid=valid, options=opts))  # fmt: skip
                if got is not None:
                    for b, sample in enumerate(got):
                        out.put(f"{key}/{b}", sample[r.name])


def _capture_hf(out: _Arrays, model_name: str, model: Any, ids: Any, mask: Any, causal: bool) -> None:
    """The bridge's capture of a Hugging Face model, its maps, and AttnLRP on decoders."""
    from attnflow.bridge import forward

    batch = {"input_ids": ids, "attention_mask": mask}
    valid = mask.bool().numpy()
    inputs: dict[str, np.ndarray] = {}
    got = out.step(f"capture/{model_name}", lambda: forward(model, batch, ("attentions", "attn_grad")))
    if got is None:
        return
    out.put(f"capture/{model_name}/attentions", got.attentions)
    out.put(f"capture/{model_name}/logits", got.logits)
    out.put(f"capture/{model_name}/attn_grad", got.need("attn_grad"))
    inputs["attn_grad"] = got.need("attn_grad").double().numpy()
    rel = out.step(f"relevance/{model_name}/lrp", lambda: forward(model, batch, ("attn_relevance",)))
    if rel is not None:
        inputs["attn_relevance"] = rel.need("attn_relevance").double().numpy()
        out.put(f"relevance/{model_name}/attn_relevance", rel.need("attn_relevance"))
    if causal:
        from attnflow.attnlrp import attnlrp_batch

        res = out.step(f"attnlrp/{model_name}", lambda: attnlrp_batch(model, ids, mask))
        for b, r in enumerate(res or []):
            for name in ("logit", "input_relevance", "hidden_relevance", "attn_relevance"):
                value = getattr(r, name, None)
                if value is not None:
                    out.put(f"attnlrp/{model_name}/{name}/{b}", value)
    _maps(out, model_name, got.attentions.double().numpy(), valid, inputs, causal=causal)


def _study_classifier(out: _Arrays, name: str, model: Any, encoder: Any, texts: list[str]) -> None:
    """One of the study's classifiers: the study's capture, the bridge (attentions, their gradients,
    LRP relevance) and every method's maps."""
    import torch

    from attnflow.bridge import forward
    from attnflow.capture import capture

    got = out.step(
        f"capture/{name}/capture", lambda: capture(model, encoder, texts, batch_size=2, progress=False)
    )
    if got is not None:
        out.put(f"capture/{name}/probs", got.probs)
        for b, a in enumerate(got.attentions):
            out.put(f"capture/{name}/attentions/{b}", a)
    enc = encoder.encode(texts)
    batch = {k: torch.as_tensor(np.asarray(enc[k])) for k in ("input_ids", "attention_mask")}
    needs = ("attentions", "attn_grad", "attn_relevance")
    cap = out.step(f"capture/{name}/bridge", lambda: forward(model, batch, needs))
    if cap is None:
        return
    out.put(f"capture/{name}/bridge_attentions", cap.attentions)
    out.put(f"capture/{name}/logits", cap.logits)
    out.put(f"relevance/{name}/attn_grad", cap.need("attn_grad"))
    out.put(f"relevance/{name}/attn_relevance", cap.need("attn_relevance"))
    inputs = {k: cap.need(k).double().numpy() for k in ("attn_grad", "attn_relevance")}
    valid = batch["attention_mask"].bool().numpy()
    _maps(out, name, cap.attentions.double().numpy(), valid, inputs, causal=False)


def _study_encoders(out: _Arrays, models: Path) -> None:
    """The study's two kinds of classifier, seeded: the agreement transformer (attnflow.models) and
    a BERT-like Hugging Face classifier as the SST-2 model is (HFClassifier + HFEncoder)."""
    import torch
    import transformers

    from attnflow.data.vocab import Vocab
    from attnflow.models import AgreementConfig, AgreementTransformer, HFClassifier, HFEncoder, WordEncoder

    texts = ["the dog near the cats barks", "the cats run", "a dog that the cats see sleeps", "dogs bark"]
    vocab = Vocab.build([t.split() for t in texts])
    torch.manual_seed(SEED)
    config = AgreementConfig(vocab_size=len(vocab), n_layer=2, n_head=2, n_embd=16, embd_pdrop=0.0,
                             attn_pdrop=0.0, resid_pdrop=0.0)  # fmt: skip
    _study_classifier(out, "agreement", AgreementTransformer(config).eval(), WordEncoder(vocab), texts)
    bert = transformers.BertForSequenceClassification.from_pretrained(
        models / "bert", attn_implementation="eager"
    )
    tokenizer = transformers.BertTokenizer.from_pretrained(models / "bert")
    texts = ["good movie", "the movie is not very good", "a bad bad movie", "good"]
    _study_classifier(out, "sst2_like", HFClassifier(bert.eval()).eval(), HFEncoder(tokenizer), texts)


def _hf_models(out: _Arrays, models: Path) -> None:
    import torch
    import transformers

    rng = np.random.default_rng(SEED)
    for name, causal in (("bert", False), ("gpt2", True), ("llama", True)):
        cls = (
            transformers.AutoModelForSequenceClassification
            if not causal
            else transformers.AutoModelForCausalLM
        )
        model = cls.from_pretrained(models / name, attn_implementation="eager").eval()
        vocab = model.config.vocab_size
        ids = torch.as_tensor(rng.integers(5, vocab, size=(3, 9)))
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0  # right padding: samples of 9, 6 and 4 tokens
        mask[2, 4:] = 0
        ids = ids.masked_fill(mask == 0, 0)
        _capture_hf(out, name, model, ids, mask, causal)


def _study_models(out: _Arrays, root: Path, samples: int) -> list[str]:
    """The study's trained models on their samples (capture stage settings), when both are there."""
    import yaml

    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    done = []
    for task in params.get("tasks", []):
        model_dir = root / params["paths"]["models"] / task / "model"
        data_dir = root / params["paths"]["prepared"] / task
        if not (model_dir.is_dir() and data_dir.is_dir()):
            continue
        from attnflow.capture import capture_study
        from attnflow.io import read_parquet
        from attnflow.models import load_classifier
        from attnflow.tasks import get_task

        model, encoder = load_classifier(model_dir, device="cpu")
        settings = params["task"][task]["capture"]
        split = get_task(task).split_file(data_dir, settings["split"])
        opts = params["capture"]
        kwargs = dict(
            n_samples=min(samples, settings["n_samples"]), seed=params["seed"], select=settings.get("select", "random"),
            needs=("attn_grad", "attn_relevance"), target=opts["target"], batch_size=opts["batch_size"],
            max_length=opts["max_length"], dtype=opts["dtype"], device="cpu",
        )  # fmt: skip
        frame = read_parquet(split)
        got = out.step(
            f"capture/{task}", lambda m=model, e=encoder, f=frame, kw=kwargs: capture_study(m, e, f, **kw)
        )
        if got is None:
            continue
        for column, values in got.samples.select_dtypes("number").items():
            out.put(f"capture/{task}/samples/{column}", values.to_numpy())
        row = params["task"][task].get("rows", "auto")
        for b, a in enumerate(got.attentions):
            out.put(f"capture/{task}/attentions/{b}", a)
            inputs = {k: v[b].astype(np.float64)[None] for k, v in (got.extra or {}).items()}
            for k, v in inputs.items():
                out.put(f"relevance/{task}/{k}/{b}", v)
            attn = a.astype(np.float64)[None]
            valid = np.ones(attn.shape[:1] + attn.shape[-1:], dtype=bool)  # (1, T_b): real tokens only
            _maps(out, f"{task}/{b}", attn, valid, inputs, causal=False, row=row)
        done.append(task)
    return done


def battery(out_dir: Path, models: Path, root: Path, samples: int) -> None:
    """Run everything on this process's attnflow; write arrays.npz and errors.json to `out_dir`."""
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # the same reduction order on both sides
    out = _Arrays()
    _study_encoders(out, models)
    _hf_models(out, models)
    study = _study_models(out, root, samples)
    np.savez(out_dir / "arrays.npz", **out.arrays)
    (out_dir / ERRORS).write_text(
        json.dumps({"errors": out.errors, "study": study}, indent=1), encoding="utf-8"
    )


# --------------------------------------------------------------------------------------------------
# The two sides
# --------------------------------------------------------------------------------------------------


def make_models(folder: Path) -> None:
    """The tiny Hugging Face models, seeded, saved once for both sides."""
    import torch
    import transformers

    specs = {
        "bert": (transformers.BertForSequenceClassification, transformers.BertConfig(
            vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=64, num_labels=2)),
        "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config(
            vocab_size=40, n_embd=16, n_layer=2, n_head=2, n_positions=64, bos_token_id=1, eos_token_id=1)),
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig(
            vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=64)),
    }  # fmt: skip
    for name, (cls, config) in specs.items():
        torch.manual_seed(SEED)
        cls(config).save_pretrained(folder / name)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"good bad movie the very not a is".split()]
    transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(folder / "bert")


def _run(cmd: list[str], **kw: Any) -> None:
    subprocess.run(cmd, check=True, **kw)


def checkout(rev: str | None, where: Path) -> Path:
    """The tree of `rev` at `where` (a git worktree), or a copy of the working tree (rev None)."""
    if rev is not None:
        _run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(where), rev])
        return where
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, (p.decode() for p in listed)):
        src = ROOT / name
        if src.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, where / name)
    return where


def install(tree: Path, site: Path, build: Path) -> None:
    """attnflow of `tree`, its C++ kernels compiled by its own CMakeLists.txt, into `site`."""
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(site),
          "--config-settings", f"build-dir={build}", str(tree)])  # fmt: skip


def side(rev: str | None, work: Path, models: Path, samples: int) -> tuple[dict[str, np.ndarray], dict]:
    """Build `rev` (None: the working tree) in `work` and run the battery against it."""
    work.mkdir(parents=True)
    tree, site, out = work / "tree", work / "site", work / "out"
    out.mkdir()
    try:
        checkout(rev, tree)
        install(tree, site, work / "build")
        env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        _run([sys.executable, str(Path(__file__).resolve()), "numbers", "--battery", str(out), "--site", str(site),
              "--models", str(models), "--study-samples", str(samples)], env=env)  # fmt: skip
    finally:
        if rev is not None and tree.exists():
            _run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    with np.load(out / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads((out / ERRORS).read_text(encoding="utf-8"))


def use_site(site: Path) -> None:
    """Import attnflow from `site` only: drop the editable install's redirect to the working tree."""
    sys.meta_path[:] = [f for f in sys.meta_path if "ScikitBuild" not in type(f).__name__]
    sys.path.insert(0, str(site))
    import attnflow

    if Path(attnflow.__file__).resolve().parents[1] != site.resolve():
        raise SystemExit(f"attnflow came from {attnflow.__file__}, not from {site}")


def numbers(args: argparse.Namespace) -> int:
    """The battery on both sides; 0 when every array of the base is bit-identical on the new side."""
    if args.battery:
        use_site(args.site)
        battery(args.battery, args.models, ROOT, args.study_samples)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="same_numbers_"))
    try:
        make_models(tmp / "models")
        base, base_info = side(args.base, tmp / "base", tmp / "models", args.study_samples)
        new, new_info = side(args.new, tmp / "new", tmp / "models", args.study_samples)
        if args.keep:
            for name in ("base", "new"):
                shutil.copytree(tmp / name / "out", args.keep / name, dirs_exist_ok=True)
    except subprocess.CalledProcessError as exc:
        traceback.print_exc()
        print(f"same.py numbers: a side failed to build or run ({exc.cmd[:4]}...)", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)
    rows = compare(base, new)
    new_label = args.new or "the working tree"
    print(f"base {args.base} vs {new_label}: {len(base)} / {len(new)} arrays")
    study = sorted(set(base_info["study"]) & set(new_info["study"]))
    print(
        f"study models: {', '.join(study) if study else 'absent (no models/<task>/model with data/prepared/<task>)'}"
    )
    refused = sorted(set(base_info["errors"]) & set(new_info["errors"]))
    if refused:
        print(
            f"refused on both sides (not compared): {len(refused)}, e.g. {refused[0]}: {new_info['errors'][refused[0]]}"
        )
    print(table(rows))
    for line in differences(base, new):
        print("  " + line)
    return 0 if all(r.identical for r in rows) else 1


# --------------------------------------------------------------------------------------------------
# stages: the base's code on today's models and data
# --------------------------------------------------------------------------------------------------

# Runs one stage module of the base: its attnflow first on the path (use_site drops the editable
# finder), then its tree (pipelines/).
RUNNER = """
import runpy, sys
from pathlib import Path
scripts, site, tree, module = sys.argv[1:5]
sys.path.insert(0, scripts)
from same import use_site
use_site(Path(site))
sys.path.insert(1, tree)
sys.argv = [module, *sys.argv[5:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def build_base(rev: str, work: Path) -> tuple[Path, Path]:
    """(tree, site): `rev` checked out at work/tree; its attnflow with its compiled kernels in work/site,
    today's prepared data and trained models linked into the tree."""
    tree, site = work / "tree", work / "site"
    tree.mkdir(parents=True)
    checkout(rev, tree)
    install(tree, site, work / "build")
    for shared in ("data", "models"):
        (tree / shared).symlink_to(ROOT / shared, target_is_directory=True)
    return tree, site


def run_stage(tree: Path, site: Path, stage: str, task: str, work: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    scripts = str(Path(__file__).resolve().parent)
    _run(
        [sys.executable, "-c", RUNNER, scripts, str(site), str(tree), f"pipelines.{stage}", task],
        cwd=tree,
        env=env,
    )


def compare_file(old: Path, new: Path) -> tuple[int, list[str]]:
    """(items compared, the names that differ, each with its largest absolute difference) of one
    output file."""
    from safetensors.numpy import load_file

    if not new.exists():
        return 1, [f"{new} is missing here"]
    if old.suffix == ".parquet":
        return 1, [] if pd.read_parquet(old).equals(pd.read_parquet(new)) else ["the table"]
    if old.suffix == ".safetensors":
        a, b = load_file(old), load_file(new)
        bad = [
            f"{k} (max |d| {f'{max_abs_diff(a[k], b[k]):.1e}' if k in a and k in b else 'missing'})"
            for k in sorted(set(a) | set(b))
            if k not in a or k not in b or not bit_identical(a[k], b[k])
        ]
        return len(set(a) | set(b)), bad
    return 1, [] if old.read_bytes() == new.read_bytes() else ["the bytes"]


def stages(args: argparse.Namespace) -> int:
    """Run the base's stages and compare every file they wrote with this checkout's."""
    work = Path(tempfile.mkdtemp(prefix="same_stage_outputs_"))
    try:
        try:
            tree, site = build_base(args.base, work)
            for stage in args.stages:  # in pipeline order: explain reads the base's own capture
                for task in args.tasks:
                    run_stage(tree, site, stage, task, work)
        except subprocess.CalledProcessError as exc:
            print(f"same.py stages: the base failed to build or run: {' '.join(map(str, exc.cmd[:6]))}")
            return 2
        items = differ = 0
        for stage in args.stages:
            for task in args.tasks:
                for old in sorted((tree / "outputs" / stage / task).rglob("*")):
                    if not old.is_file():
                        continue
                    here = ROOT / old.relative_to(tree)
                    n, bad = compare_file(old, here)
                    items, differ = items + n, differ + len(bad)
                    print(
                        f"{here.relative_to(ROOT)}: {n} compared, {len(bad)} differ {bad[:5] if bad else ''}"
                    )
        print(f"base {args.base} vs this checkout's outputs: {items} arrays / tables, {differ} differ")
        return 1 if differ or items == 0 else 0
    finally:
        if (work / "tree").exists():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "tree")], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)


# --------------------------------------------------------------------------------------------------
# tables: the committed tables against a commit's
# --------------------------------------------------------------------------------------------------


def read_table(path: str, base: str | None) -> pd.DataFrame | None:
    """The table at ``path`` in the working tree (base None) or in commit ``base``; None if absent."""
    if base is None:
        file = ROOT / path
        data = file.read_bytes() if file.is_file() else None
    else:
        got = subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, capture_output=True)
        data = got.stdout if got.returncode == 0 else None
    if data is None:
        return None
    table = pd.read_parquet(io.BytesIO(data)) if path.endswith(".parquet") else pd.read_csv(io.BytesIO(data))
    return table.drop(columns=[c for c in ("commit",) if c in table.columns])


def compare_tables(old: pd.DataFrame, new: pd.DataFrame) -> tuple[int, bool, float]:
    """(rows, equal bit for bit, largest |difference| of ``mean`` where the rows line up, else nan;
    a mean that is NaN on one side only counts as inf, as in max_abs_diff)."""
    old, new = old.reset_index(drop=True), new.reset_index(drop=True)
    if old.equals(new):
        return len(new), True, 0.0
    if len(old) != len(new) or "mean" not in new:
        return len(new), False, float("nan")
    return len(new), False, max_abs_diff(old["mean"].to_numpy(float), new["mean"].to_numpy(float))


def parts(path: str, table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A correlation table as its configured all-heads rows (Tables 1-3), its sensitivity variants
    (``correlate.*`` re-scorings; ``attribution.*`` recomputed importance with its reference) and its
    per-head rows; other tables whole."""
    if path.endswith("correlations.parquet") or path.endswith("correlations.csv"):
        heads = table[table["head"].isna()]
        variant = heads["variant"].astype(str)
        return {
            f"{path} (all heads, configured)": heads[variant == "configured"],
            f"{path} (correlate.* switches)": heads[variant.str.startswith("correlate.")],
            f"{path} (attribution.* switches)": heads[
                ~variant.isin(["configured"]) & ~variant.str.startswith("correlate.")
            ],
            f"{path} (per head)": table[table["head"].notna()],
        }
    return {path: table}


def tables(args: argparse.Namespace) -> int:
    """Print, per committed table, whether it equals the base's bit for bit."""
    paths = [f"reports/{t}/{name}" for t in TASKS for name in
             ("correlations.parquet", "faithfulness.parquet", "method_agreement.parquet")]  # fmt: skip
    paths += ["reports/sweep/correlations.csv", "reports/sweep/faithfulness.csv"]
    print(f"| table | rows | bit-identical to {args.base} | largest change of a mean |")
    print("| --- | --- | --- | --- |")
    for path in paths:
        old, new = read_table(path, args.base), read_table(path, None)
        if old is None or new is None:
            print(f"| {path} | missing {'at ' + args.base if old is None else 'here'} | | |")
            continue
        old_parts = parts(path, old)
        for name, table in parts(path, new).items():
            rows, same, diff = compare_tables(old_parts[name], table)
            print(f"| {name} | {rows} | {'yes' if same else 'no'} | {diff:.2g} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/same.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="question", required=True)
    p = sub.add_parser("numbers", help="capture, maps and relevance at two revisions, bit for bit")
    p.add_argument("--base", default="HEAD", help="the revision the numbers must equal (default HEAD)")
    p.add_argument("--new", default=None, help="the revision to check (default: the working tree)")
    p.add_argument("--study-samples", type=int, default=16, help="samples per trained study model")
    p.add_argument("--keep", type=Path, help="keep both sides' arrays in this folder")
    p.add_argument("--battery", type=Path, help=argparse.SUPPRESS)  # internal: run one side
    p.add_argument("--site", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    p = sub.add_parser("stages", help="the stage outputs the base's code would write, file by file")
    p.add_argument("--base", required=True, help="the revision whose code runs the stages")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    sub.add_parser("tables", help="the committed tables against a commit's, row for row").add_argument(
        "--base", required=True, help="the commit to compare with"
    )
    args = parser.parse_args(argv)
    return {"numbers": numbers, "stages": stages, "tables": tables}[args.question](args)


if __name__ == "__main__":
    raise SystemExit(main())
