"""The ``attnflow`` command line: explain a Hugging Face model's predictions from the terminal.

    attnflow explain --model minilm --text "a gripping, funny film" --method flow --out out/

Verbs are argparse sub-commands, each registered by an ``_add_<verb>(subparsers)`` function that
sets ``func``; shared pieces (device choice, model loading, output formats, the error type that
exits with code 2) are module-level helpers another verb can reuse. torch and transformers are
imported inside the verbs, so ``attnflow --help`` starts fast.
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import tempfile
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
    """``--device``: attnflow.devices.resolve_device, its refusal said as a CLI error."""
    from attnflow.devices import resolve_device as resolve

    try:
        return str(resolve(name))
    except (ValueError, RuntimeError) as exc:
        raise CLIError(f"--device {name}: {exc}") from None


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise CLIError(f"--format {text!r}: choose a comma-separated list from {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def parse_methods(text: str) -> list[str]:
    """Comma-separated method names, checked against attnflow.explain.EXPLAINERS and the model-level
    methods (attnlrp) without importing torch."""
    from attnflow.explain import EXPLAINERS
    from attnflow.method_inputs import MODEL_METHODS

    choices = sorted([*EXPLAINERS, *MODEL_METHODS])
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in choices]
    if bad or not methods:
        raise CLIError(f"unknown method {', '.join(bad) or repr(text)}; choose from {', '.join(choices)}")
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
    from attnflow.hf import UnsafeCheckpointError, load_model

    try:
        return load_model(name, device=device)
    except (FileNotFoundError, UnsafeCheckpointError) as exc:
        raise CLIError(f"--model {name}: {exc}") from None
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CLIError(f"--model {name}: cannot load a model from it ({first})") from None
    except ImportError as exc:
        raise CLIError(f"--model {name}: {exc}") from None


def terminal_text(text: str) -> str:
    """`text` safe to print: control characters (ESC, BEL, CR, newlines...) shown as \\xNN escapes,
    so an input cannot move the cursor, retitle the window or hide what was printed.

    >>> terminal_text("a\\x1b[31mb")
    'a\\\\x1b[31mb'
    """
    return "".join(ch if ch.isprintable() else _escape(ord(ch)) for ch in text)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _blank(text: str) -> bool:
    """Nothing to explain: only whitespace and invisible (control / format) characters."""
    return not any(ch.isprintable() and not ch.isspace() for ch in text)


def check_encoding(name: str) -> str:
    """--encoding: a codec Python knows."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise CLIError(f"--encoding {name}: unknown text encoding (e.g. utf-8, latin-1, cp1252)") from None


def _decode(data: bytes, name: str, encoding: str) -> str:
    """The bytes of --file as text; a byte that is not `encoding` is named by line and offset."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)  # 1-based, in bytes
        raise CLIError(
            f"--file {name}: not {encoding} text: line {line}, byte offset {exc.start} (byte {column} of the "
            f"line) is 0x{data[exc.start]:02x}; pass the file's encoding, e.g. --encoding latin-1"
        ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark is no part of the first input


def read_inputs(
    texts: Sequence[str] | None, file: str | None, *, option: str = "--text", encoding: str = "utf-8"
) -> list[str]:
    """The --text values, then the non-empty lines of --file ('-' = stdin) decoded as `encoding`.

    A --text that is empty or only whitespace / invisible characters is refused. In a file, blank
    lines separate inputs and are skipped; a line of only invisible characters (e.g. control
    bytes) is refused by its number, and so is a file with no text at all.
    """
    nothing = "nothing to complete" if option == "--prompt" else "nothing to explain"
    out = []
    for i, text in enumerate(texts or []):
        if _blank(text):
            which = f" (the {_ordinal(i + 1)})" if len(texts or []) > 1 else ""
            raise CLIError(
                f"{option} {terminal_text(repr(text))}{which}: {nothing} (empty or only whitespace)"
            )
        out.append(text)
    if file is not None:
        if file == "-":
            name, data = "-", sys.stdin.buffer.read()
        else:
            path = Path(file)
            if not path.is_file():
                raise CLIError(f"--file {file}: no such file")
            try:
                name, data = file, path.read_bytes()
            except OSError as exc:
                raise CLIError(f"--file {file}: cannot read it ({exc.strerror or exc})") from None
        lines = _decode(data, name, encoding).splitlines()
        kept = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # a blank line separates inputs
            if _blank(line):
                raise CLIError(
                    f"--file {name}: line {number} holds only invisible characters "
                    f"({terminal_text(repr(line))}); {nothing}"
                )
            kept.append(line.strip())
        if not kept:
            raise CLIError(
                f"--file {name}: no text in it ({len(lines)} lines, all blank); one input per line"
            )
        out += kept
    if not out:
        raise CLIError("nothing to explain: pass --text TEXT or --file FILE (one input per line)")
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def check_out(out: str) -> Path:
    """--out as a folder that exists or can be made, and takes files; refused in one line otherwise.

    Checked before the model loads; nothing is created here.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise CLIError(f"--out {out}: a file is there; expected a folder (existing or new) for the outputs")
    anchor = path.absolute()
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent  # the nearest existing folder, where the missing ones would be made
    if not anchor.is_dir():
        raise CLIError(
            f"--out {out}: {anchor} is a file, so no folder can be made under it; expected a folder"
        )
    if not os.access(anchor, os.W_OK | os.X_OK) or not _can_create_in(anchor):
        what = "the folder" if anchor == path.absolute() else f"its nearest existing folder {anchor}"
        raise CLIError(f"--out {out}: {what} is read-only; expected a folder where files can be written")
    return path


def _can_create_in(folder: Path) -> bool:
    """A file can be made in `folder` (root passes mode checks, but not a read-only file system)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _write_error(out: Path, exc: OSError) -> CLIError:
    """An OSError while writing the outputs, as one line naming the path."""
    where = exc.filename or out
    return CLIError(f"--out {out}: cannot write {where} ({exc.strerror or exc}); expected a writable folder")


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
    p.add_argument("--encoding", default="utf-8", help="text encoding of --file")
    p.add_argument(
        "--method",
        default=DEFAULT_METHODS,
        help="comma-separated methods: raw, rollout, flow, chefer, chefer_lrp, attnlrp, ...",
    )
    p.add_argument(
        "--layer",
        default="-1",
        help="layer shown in the table: 1 = the first (as L1 in every table and figure); -1 = the last",
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


def _summary(e: Any) -> str:
    from attnflow.display import row_text

    parts = [f"layer {e.layer + 1}/{e.num_layers}", row_text(e)]
    if e.label is not None:
        parts.append(f"prediction: {e.label!r}" if isinstance(e.label, str) else f"prediction: {e.label}")
    return " · ".join(parts)


def cmd_explain(args: argparse.Namespace) -> int:
    methods = parse_methods(args.method)
    rows = parse_rows(args.rows)
    layer = parse_layer(args.layer)
    texts = read_inputs(args.text, args.file, encoding=check_encoding(args.encoding))
    formats = parse_formats(args.format or (DEFAULT_FORMATS if len(texts) <= PNG_INPUTS else MANY_FORMATS))
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    if not 0.0 <= args.residual <= 1.0:
        raise CLIError(f"--residual must be in [0, 1], got {args.residual}")
    if args.out is not None:
        check_out(args.out)

    _quiet_transformers()
    from attnflow.display import explanation_figure, explanation_item
    from attnflow.hf import AttentionUnavailableError, NoOutputHeadError, explain_texts, save_explanations
    from attnflow.viz import save_png, token_table, write_html

    device = resolve_device(args.device)
    model, tokenizer = load(args.model, device)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise CLIError(f"--model {args.model}: it takes images, not text (use attnflow.explain_image)")
    try:
        explanations = explain_texts(
            model, tokenizer, texts, methods=methods, layer=-1, rows=rows, residual=args.residual,
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

    for e in explanations:  # the layer shown, 1-based on the command line
        e.layer = int(layer_index(layer, e.num_layers))
    show_table = args.table if args.table is not None else len(texts) <= TABLE_INPUTS
    if show_table and not args.quiet:
        for i, e in enumerate(explanations):
            text = terminal_text(e.text or "")
            head = f"[{i + 1}] {text}" if len(texts) > 1 else text
            scores = {m: e.scores(m) for m in methods}
            muted = e.meta.get("special", [])
            title = f"{head}\n{_summary(e)}" + ("  (░: special token, off the bar scale)" if muted else "")
            print(token_table(e.tokens, scores, title=title, muted=muted))
            print()

    if args.out is None:
        return 0
    out = Path(args.out)
    try:
        written: list[Path] = []
        name = Path(args.model).name or args.model
        if "png" in formats:
            for i, e in enumerate(explanations):
                fig = explanation_figure(e, methods=methods, name=name, scale=args.scale)
                written.append(save_png(out / _png_name(i, len(explanations)), fig))
        if "html" in formats:
            items = [explanation_item(e, methods=methods, name=name) for e in explanations]
            written.append(write_html(out / "explain.html", items, title=f"attnflow explain · {name}"))
        for fmt in ("json", "safetensors"):
            if fmt in formats:
                written.append(save_explanations(explanations, out / f"explain.{fmt}"))
    except OSError as exc:  # checked by check_out; a disk may still fill or a folder vanish
        raise _write_error(out, exc) from None
    if not args.quiet:
        shown = written if len(written) <= 6 else [*written[:5], f"... ({len(written)} files)"]
        print("wrote " + ", ".join(str(p) for p in shown), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------------
# generate
# --------------------------------------------------------------------------------------------------

GENERATE_METHODS = (
    "raw",
    "rollout",
    "flow",
    "chefer",
    "attnlrp",
)  # = generate.explanation.GENERATION_METHODS
GENERATED_ROWS_PER_PAGE = 40  # rows of one generation PNG page (keeps it under viz.MAX_PNG_PIXELS)
SINK_CHOICES = ("auto", "none", "drop", "diagonal")
RECEPTIVE_FIELD_CHOICES = ("none", "uniform", "column")


def _add_generate(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="rollout / flow over the prompt for every token a language model generates",
        description=(
            "Generate a completion with a decoder-only language model, then explain each generated token "
            "by the row that predicted it: per method and layer, how much each prompt token contributes "
            "(Deb 2021's M [generated, prompt, layer]). Prints a token table for one generated token; "
            "writes a PNG heatmap (generated x prompt per method, and layer x prompt for that token), "
            "an HTML page and/or the maps."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="hub name, local folder, or 'smollm2' (the packaged SmolLM2-135M-Instruct)",
    )
    p.add_argument("--prompt", action="append", help="prompt to complete (repeat for several)")
    p.add_argument("--file", help="one prompt per non-empty line of this file ('-' = stdin)")
    p.add_argument("--encoding", default="utf-8", help="text encoding of --file")
    p.add_argument("--max-new-tokens", type=int, default=20, help="tokens to generate")
    p.add_argument("--method", default="rollout", help=f"comma-separated: {', '.join(GENERATE_METHODS)}")
    p.add_argument(
        "--sinks",
        choices=SINK_CHOICES,
        default="auto",
        help="attention sinks: auto (= diagonal at the sinks found), none (plain, as Deb 2021), drop, diagonal",
    )
    p.add_argument(
        "--receptive-field",
        choices=RECEPTIVE_FIELD_CHOICES,
        default="none",
        help="receptive-field normalisation of raw / rollout / flow",
    )
    p.add_argument(
        "--over",
        choices=("prompt", "all"),
        default="prompt",
        help="columns: the prompt or every earlier token",
    )
    p.add_argument("--residual", type=float, default=0.5, help="residual weight: A = (1-r) W + r I")
    p.add_argument(
        "--token",
        type=int,
        default=0,
        help="generated token shown in the table (negative counts from the end)",
    )
    p.add_argument(
        "--layer", default="mean", help="layer shown: 'mean' over layers (as Deb 2021) or an index"
    )
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, help="sampling temperature (with --sample)")
    p.add_argument("--top-k", type=int, help="top-k sampling (with --sample)")
    p.add_argument("--top-p", type=float, help="nucleus sampling (with --sample)")
    p.add_argument("--seed", type=int, help="seed for sampling")
    p.add_argument(
        "--faithfulness",
        help="comma-separated k values: print the log-prob drop when the k top-ranked prompt tokens are "
        "deleted vs k random ones (e.g. 1,3)",
    )
    p.add_argument("--out", help="folder for the files (none written without it)")
    p.add_argument("--format", default=DEFAULT_FORMATS, help=f"comma-separated: {', '.join(FORMATS)}")
    p.add_argument(
        "--scale",
        choices=("panel", "row"),
        default="row",
        help="PNG shading: one 0..max scale per method, or relative to each row's largest score",
    )
    p.add_argument(
        "--cache-dir", help="where 'smollm2' is converted on first use (default: ~/.cache/attnflow)"
    )
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (GPU when present)")
    p.add_argument("--quiet", action="store_true", help="no table")
    p.set_defaults(func=cmd_generate)


def parse_layer(text: str, *, mean: bool = False) -> int | str:
    """--layer as given: "mean" (where allowed), 1..L (L1 = the first layer, as in every table and
    figure) or -1..-L (from the top); 0 is refused. Checked against the model by `layer_index`."""
    if mean and text == "mean":
        return text
    try:
        layer = int(text)
    except ValueError:
        choices = "'mean', " if mean else ""
        raise CLIError(f"--layer {text!r}: {choices}a layer number (1 = the first, -1 = the last)") from None
    if layer == 0:
        raise CLIError(
            "--layer 0: layers are numbered from 1 (L1 = the first, as in the tables); -1 = the last"
        )
    return layer


def layer_index(layer: int | str, n_layers: int) -> int | str:
    """The 0-based index of a parsed --layer on a model of `n_layers` layers ("mean" stays)."""
    if layer == "mean":
        return layer
    if not (1 <= int(layer) <= n_layers or -n_layers <= int(layer) <= -1):
        raise CLIError(
            f"--layer {layer}: the model has {n_layers} layers (1..{n_layers}, or -1..-{n_layers})"
        )
    return int(layer) - 1 if int(layer) > 0 else int(layer) % n_layers


def _parse_ks(text: str | None) -> list[int]:
    if text is None:
        return []
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise CLIError(f"--faithfulness {text!r}: comma-separated whole numbers, e.g. 1,3") from None
    if not ks or min(ks) < 1:
        raise CLIError(f"--faithfulness {text!r}: comma-separated numbers >= 1, e.g. 1,3")
    return ks


def _generate_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"do_sample": bool(args.sample)}
    for key in ("temperature", "top_k", "top_p"):
        value = getattr(args, key)
        if value is not None:
            if not args.sample:
                raise CLIError(f"--{key.replace('_', '-')} needs --sample (greedy decoding ignores it)")
            kwargs[key] = value
    return kwargs


def _layer_text(layer: int | str, n_layers: int) -> str:
    return (
        f"mean over {n_layers} layers" if layer == "mean" else f"layer {int(layer) % n_layers + 1}/{n_layers}"
    )


def cmd_generate(args: argparse.Namespace) -> int:
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in methods if m not in GENERATE_METHODS]
    if bad or not methods:
        raise CLIError(
            f"unknown method {', '.join(bad) or repr(args.method)}; choose from {', '.join(GENERATE_METHODS)}"
        )
    methods = list(dict.fromkeys(methods))
    try:
        prompts = read_inputs(
            args.prompt, args.file, option="--prompt", encoding=check_encoding(args.encoding)
        )
    except CLIError as exc:
        if not str(exc).startswith("nothing to explain:"):
            raise
        raise CLIError(
            "nothing to complete: pass --prompt TEXT or --file FILE (one prompt per line)"
        ) from None
    formats = parse_formats(args.format)
    layer = parse_layer(args.layer, mean=True)
    ks = _parse_ks(args.faithfulness)
    if args.max_new_tokens < 1:
        raise CLIError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not 0.0 <= args.residual <= 1.0:
        raise CLIError(f"--residual must be in [0, 1], got {args.residual}")
    gen_kwargs = _generate_kwargs(args)
    if args.out is not None:
        check_out(args.out)

    _quiet_transformers()
    from attnflow.display import layer_labels
    from attnflow.generate import SMOLLM2, explain_generation, faithfulness, resolve_lm
    from attnflow.generate.explanation import save_generations
    from attnflow.hf import AttentionUnavailableError, check_vocabulary
    from attnflow.viz import page_slices, shorten, token_table, write_html, write_png

    device = resolve_device(args.device)
    name = args.model
    if name == SMOLLM2:
        try:
            name = resolve_lm(name, cache=args.cache_dir)
        except ImportError as exc:
            raise CLIError(f"--model {args.model}: {exc}") from None
    model, tokenizer = load(name, device)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise CLIError(f"--model {args.model}: it takes images, not text")
    can_generate = getattr(model, "can_generate", None)
    if not (callable(can_generate) and can_generate()) or getattr(model.config, "is_encoder_decoder", False):
        raise CLIError(f"--model {args.model}: {type(model).__name__} is not a decoder-only language model")
    try:
        check_vocabulary(tokenizer, prompts)
    except ValueError as exc:
        raise CLIError(f"--model {args.model}: {exc}") from None
    explanations = []
    checks = []
    for prompt in prompts:
        try:
            e = explain_generation(
                model, tokenizer, prompt, max_new_tokens=args.max_new_tokens, methods=methods, sinks=args.sinks,
                receptive_field=args.receptive_field, over=args.over, residual=args.residual,
                generate_kwargs=gen_kwargs, seed=args.seed,
            )  # fmt: skip
            explanations.append(e)
            usable = [k for k in ks if k < e.n_prompt]  # at least one prompt token must stay
            checks.append(faithfulness(model, e, ks=usable, seed=args.seed or 0) if usable else None)
        except AttentionUnavailableError as exc:
            raise CLIError(f"--model {args.model}: {exc}") from None
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        except TypeError as exc:  # a model without generate / logits
            raise CLIError(f"--model {args.model}: cannot generate with it ({exc})") from None

    for e in explanations:
        n = e.n_generated
        if not -n <= args.token < n:
            raise CLIError(f"--token {args.token}: the completion has {n} generated tokens (use 0..{n - 1})")
    if explanations:  # one model: one layer count
        layer = layer_index(layer, explanations[0].num_layers)

    if not args.quiet:
        for i, (e, check) in enumerate(zip(explanations, checks, strict=True)):
            t = args.token % e.n_generated
            head = f"[{i + 1}] " if len(explanations) > 1 else ""
            sinks = e.options["sink_keys"] if e.options["sink_mode"] != "none" else "off"
            title = (
                f"{head}{e.prompt!r} -> {e.completion!r}\n"
                f"generated token {t}: {e.generated_tokens[t]!r} (row {e.rows[t]}) · {_layer_text(layer, e.num_layers)}"
                f" · sinks {e.options['sinks']} {sinks} · receptive field {e.options['receptive_field']}"
            )
            scores = {m: e.scores(m, t, layer) for m in methods}
            print(token_table(e.columns, scores, title=title, muted=e.special_columns))
            share = ", ".join(f"{m} {float(e.first_token_share[m].mean()):.3f}" for m in methods)
            print(f"first-token share (last layer, mean over generated tokens): {share}")
            if check is not None:
                summary = check.summary()
                for k in sorted({r["k"] for r in check.records}):
                    cells = ", ".join(
                        f"{m} {summary[m][k]:+.3f}" for m in [*methods, "random"] if m in summary
                    )
                    print(f"log-prob drop, {k} prompt token(s) deleted (mean over generated tokens): {cells}")
            print()

    if args.out is None:
        return 0
    out = Path(args.out)
    try:
        written: list[Path] = []
        label = Path(args.model).name or args.model
        many = len(explanations) > 1
        for i, e in enumerate(explanations):
            stem = f"generate_{i + 1:0{len(str(len(explanations)))}d}" if many else "generate"
            t = args.token % e.n_generated
            rows = [f"{k}: {tok}" for k, tok in enumerate(e.generated_tokens)]
            opts = f"sinks {e.options['sinks']} · receptive field {e.options['receptive_field']}"
            sub = f"{label} · {_layer_text(layer, e.num_layers)} · {opts}"
            columns = "prompt token" if e.options["over"] == "prompt" else "token"
            if "png" in formats:
                pages = page_slices(len(rows), GENERATED_ROWS_PER_PAGE)
                for k, page in enumerate(pages):
                    part = f" · generated tokens {page.start}-{page.stop - 1}" if len(pages) > 1 else ""
                    written.append(
                        write_png(
                            out / (f"{stem}.png" if len(pages) == 1 else f"{stem}_page{k + 1}.png"),
                            {m: e.matrix(m, layer)[page] for m in methods}, columns=e.columns, rows=rows[page],
                            row_name="generated token", column_name=columns,
                            scale=args.scale, muted_columns=e.special_columns,
                            title=f"“{shorten(e.prompt)}” → “{shorten(e.completion, 60)}”\n{sub}{part}",
                        )
                    )  # fmt: skip
                written.append(
                    write_png(
                        out / f"{stem}_token{t}.png", {m: e.maps[m][t].T for m in methods}, columns=e.columns,
                        rows=layer_labels(e.num_layers), row_name="layer", column_name=columns, scale=args.scale,
                        muted_columns=e.special_columns,
                        title=f"“{shorten(e.prompt)}” → {e.generated_tokens[t]!r} (generated token {t})\n{label} · {opts}",
                    )
                )  # fmt: skip
        if "html" in formats:
            items = [
                {
                    "title": f"{e.prompt} → {e.completion}",
                    "subtitle": f"{label} · {_layer_text(layer, e.num_layers)} · sinks {e.options['sinks']} · receptive field {e.options['receptive_field']}",
                    "columns": e.columns,
                    "rows": [f"{k}: {tok}" for k, tok in enumerate(e.generated_tokens)],
                    "maps": {m: e.matrix(m, layer) for m in methods},
                    "row": args.token % e.n_generated,
                    "method": methods[-1],
                    "muted": e.special_columns,
                }
                for e in explanations
            ]
            written.append(
                write_html(
                    out / "generate.html",
                    items,
                    title=f"attnflow generate · {label}",
                    row_name="generated token",
                )
            )
        for fmt in ("json", "safetensors"):
            if fmt in formats:
                written.append(save_generations(explanations, out / f"generate.{fmt}"))
    except OSError as exc:  # checked by check_out; a disk may still fill or a folder vanish
        raise _write_error(out, exc) from None
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
    _add_generate(sub)
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
        print(f"attnflow {args.command}: error: {terminal_text(str(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        from attnflow._extras import extra_hint

        hint = extra_hint(exc.name)
        if debug or hint is None:
            raise
        print(f"attnflow {args.command}: error: {exc.name!r} is not installed: {hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
