"""The ``attnflow`` command line: explain a Hugging Face model's predictions from the terminal.

    attnflow explain --model minilm --text "a gripping, funny film" --method flow --out out/

Verbs are argparse sub-commands, each registered by an ``_add_<verb>(subparsers)`` function that
sets ``func``; shared pieces (device choice, model loading, output formats, the error type that
exits with code 2) are module-level helpers another verb can reuse. torch and transformers are
imported inside the verbs, so ``attnflow --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CLIError", "HelpFormatter", "build_parser", "main"]

FORMATS = ("png", "html", "json", "safetensors")
DEFAULT_FORMATS = "png,html"
# Above this many inputs the default skips PNGs (one figure per input, ~0.3-0.7 s each) for JSON.
PNG_INPUTS = 50
MANY_FORMATS = "html,json"
DEFAULT_METHODS = "raw,rollout,flow"
ROW_CHOICES = ("auto", "cls", "last", "max", "mean")
# With more inputs than this, PNGs are still one per input but the terminal tables are off by default.
TABLE_INPUTS = 10


class CLIError(Exception):
    """A problem with the user's input: printed as one line, exit code 2, no traceback."""


# --------------------------------------------------------------------------------------------------
# Shared helpers (for every verb)
# --------------------------------------------------------------------------------------------------


def resolve_device(name: str) -> str:
    """'auto' -> 'cuda' when a GPU is present, else 'cpu'; 'cuda' without a GPU is an error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise CLIError(f"--device {name}: no CUDA GPU is available here (use --device cpu or auto)")
    return name


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise CLIError(f"--format {text!r}: choose a comma-separated list from {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def parse_methods(text: str) -> list[str]:
    """Comma-separated method names, checked against attnflow.explain.EXPLAINERS (no torch)."""
    from attnflow.explain import EXPLAINERS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in EXPLAINERS]
    if bad or not methods:
        raise CLIError(
            f"unknown method {', '.join(bad) or repr(text)}; choose from {', '.join(sorted(EXPLAINERS))}"
        )
    return list(dict.fromkeys(methods))


def parse_rows(text: str) -> str | int:
    if text in ROW_CHOICES:
        return text
    try:
        return int(text)
    except ValueError:
        raise CLIError(f"--rows {text!r}: choose from {', '.join(ROW_CHOICES)} or a token index") from None


def load(name: str, device: str) -> tuple[Any, Any]:
    """(model, tokenizer or image processor) for --model, with the errors a user can act on."""
    from attnflow.hf import load_model

    try:
        return load_model(name, device=device)
    except FileNotFoundError as exc:
        raise CLIError(f"--model {name}: {exc}") from None
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CLIError(f"--model {name}: cannot load a model from it ({first})") from None
    except ImportError as exc:
        raise CLIError(f"--model {name}: {exc}") from None


def read_inputs(texts: Sequence[str] | None, file: str | None) -> list[str]:
    """The --text values, then the non-empty lines of --file ('-' = stdin)."""
    out = list(texts or [])
    if file is not None:
        if file == "-":
            lines = sys.stdin.read().splitlines()
        else:
            path = Path(file)
            if not path.is_file():
                raise CLIError(f"--file {file}: no such file")
            lines = path.read_text(encoding="utf-8").splitlines()
        out += [line.strip() for line in lines if line.strip()]
    if not out:
        raise CLIError("nothing to explain: pass --text TEXT or --file FILE (one input per line)")
    return out


def _quiet_transformers() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
    except ImportError:
        pass


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where there is a default worth saying (not None / False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or isinstance(action, argparse.BooleanOptionalAction):
            return action.help or ""
        return super()._get_help_string(action)


# --------------------------------------------------------------------------------------------------
# explain
# --------------------------------------------------------------------------------------------------


def _add_explain(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="token attributions (raw attention, rollout, flow) of a model's prediction",
        description=(
            "Explain what a Hugging Face model attends to: per method and layer, how much each input "
            "token contributes to the explained row ([CLS] for encoders, the last token for language "
            "models). Prints a token table; writes a PNG heatmap, an HTML page and/or the maps."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", required=True, help="hub name, local folder, or 'minilm' (packaged MiniLM)")
    p.add_argument("--text", action="append", help="text to explain (repeat for several)")
    p.add_argument("--file", help="explain every non-empty line of this file ('-' = stdin)")
    p.add_argument(
        "--method", default=DEFAULT_METHODS, help="comma-separated methods (see attnflow.explain.EXPLAINERS)"
    )
    p.add_argument(
        "--layer", type=int, default=-1, help="layer shown in the table (negative counts from the top)"
    )
    p.add_argument(
        "--rows", default="auto", help=f"query row explained: {', '.join(ROW_CHOICES)} or a token index"
    )
    p.add_argument("--residual", type=float, default=0.5, help="residual weight: A = (1-r) W + r I")
    p.add_argument("--merge-words", action="store_true", help="merge word pieces into words (scores summed)")
    p.add_argument(
        "--truncate", action="store_true", help="cut texts longer than the model takes instead of failing"
    )
    p.add_argument("--out", help="folder for the files (none written without it)")
    p.add_argument(
        "--format",
        help=f"comma-separated: {', '.join(FORMATS)} (default: {DEFAULT_FORMATS}; {MANY_FORMATS} for more than "
        f"{PNG_INPUTS} inputs)",
    )
    p.add_argument(
        "--scale",
        choices=("panel", "row"),
        default="panel",
        help="PNG shading: one 0..max scale per method, or relative to each layer's largest score",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (GPU when present)")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward")
    p.add_argument(
        "--table",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"print the token table (default: on for up to {TABLE_INPUTS} inputs)",
    )
    p.add_argument("--quiet", action="store_true", help="no table, no progress bar")
    p.set_defaults(func=cmd_explain)


def _png_name(i: int, n: int) -> str:
    return "explain.png" if n == 1 else f"explain_{i + 1:0{len(str(n))}d}.png"


def _layer_labels(n: int) -> list[str]:
    return [f"L{i + 1}" for i in range(n)]


def _row_text(e: Any) -> str:
    if isinstance(e.row, str):
        return f"{e.row} over rows"
    label = e.meta.get("row_label")
    return f"row {e.row} ({label})" if label else f"row {e.row}"


def _short(text: str | None, limit: int = 80) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(e: Any) -> str:
    parts = [f"layer {e.layer + 1}/{e.num_layers}", _row_text(e)]
    if e.label is not None:
        parts.append(f"prediction: {e.label!r}" if isinstance(e.label, str) else f"prediction: {e.label}")
    return " · ".join(parts)


def cmd_explain(args: argparse.Namespace) -> int:
    methods = parse_methods(args.method)
    rows = parse_rows(args.rows)
    texts = read_inputs(args.text, args.file)
    formats = parse_formats(args.format or (DEFAULT_FORMATS if len(texts) <= PNG_INPUTS else MANY_FORMATS))
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    if not 0.0 <= args.residual <= 1.0:
        raise CLIError(f"--residual must be in [0, 1], got {args.residual}")

    _quiet_transformers()
    from attnflow.hf import AttentionUnavailableError, NoOutputHeadError, explain_texts, save_explanations
    from attnflow.viz import token_table, write_html, write_png

    device = resolve_device(args.device)
    model, tokenizer = load(args.model, device)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise CLIError(f"--model {args.model}: it takes images, not text (use attnflow.explain_image)")
    try:
        explanations = explain_texts(
            model, tokenizer, texts, methods=methods, layer=args.layer, rows=rows, residual=args.residual,
            merge=args.merge_words, truncate=args.truncate, batch_size=args.batch_size,
            progress=len(texts) > 1 and not args.quiet,
        )  # fmt: skip
    except AttentionUnavailableError as exc:
        raise CLIError(f"--model {args.model}: {exc}") from None
    except NoOutputHeadError:
        raise CLIError(
            f"--method {args.method}: a gradient-based method explains a prediction, and --model {args.model} "
            f"({type(model).__name__}) has no output head (no logits); use a classifier or a language model"
        ) from None
    except (
        ValueError
    ) as exc:  # bad input found by the library (too long, bad layer, ...); --debug shows where
        raise CLIError(str(exc)) from exc

    show_table = args.table if args.table is not None else len(texts) <= TABLE_INPUTS
    if show_table and not args.quiet:
        for i, e in enumerate(explanations):
            head = f"[{i + 1}] {e.text}" if len(texts) > 1 else e.text
            scores = {m: e.scores(m) for m in methods}
            muted = e.meta.get("special", [])
            title = f"{head}\n{_summary(e)}" + ("  (░: special token, off the bar scale)" if muted else "")
            print(token_table(e.tokens, scores, title=title, muted=muted))
            print()

    if args.out is None:
        return 0
    out = Path(args.out)
    written: list[Path] = []
    name = Path(args.model).name or args.model
    if "png" in formats:
        for i, e in enumerate(explanations):
            written.append(
                write_png(
                    out / _png_name(i, len(explanations)),
                    {m: e.maps[m] for m in methods},
                    columns=e.tokens,
                    rows=_layer_labels(e.num_layers),
                    scale=args.scale,
                    muted_columns=e.meta.get("special", ()),
                    title=f"“{_short(e.text)}”\n{name} · {_row_text(e)}"
                    + (f" · prediction {e.label}" if e.label is not None else ""),
                )
            )
    if "html" in formats:
        items = [
            {
                "title": e.text,
                "subtitle": f"{name} · {_row_text(e)}"
                + (f" · prediction: {e.label}" if e.label is not None else ""),
                "columns": e.tokens,
                "rows": _layer_labels(e.num_layers),
                "maps": {m: e.maps[m] for m in methods},
                "row": e.layer,
                "method": methods[-1],
                "muted": e.meta.get("special", []),
            }
            for e in explanations
        ]
        written.append(write_html(out / "explain.html", items, title=f"attnflow explain · {name}"))
    for fmt in ("json", "safetensors"):
        if fmt in formats:
            written.append(save_explanations(explanations, out / f"explain.{fmt}"))
    if not args.quiet:
        shown = written if len(written) <= 6 else [*written[:5], f"... ({len(written)} files)"]
        print("wrote " + ", ".join(str(p) for p in shown), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from attnflow import __version__

    parser = argparse.ArgumentParser(
        prog="attnflow",
        description="Attention rollout and attention flow for Hugging Face models (Abnar & Zuidema 2020).",
    )
    parser.add_argument("--version", action="version", version=f"attnflow {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="VERB", required=True)
    _add_explain(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("ATTNFLOW_DEBUG", "") not in ("", "0")
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        if debug:
            raise
        print(f"attnflow {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
