"""``attnflow explain``: token attributions (raw attention, rollout, flow, ...) of a model's prediction."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from attnflow.cli.common import (
    DEFAULT_FORMATS,
    DEFAULT_METHODS,
    FORMATS,
    MANY_FORMATS,
    ROW_CHOICES,
    TABLE_INPUTS,
    CLIError,
    HelpFormatter,
    _quiet_transformers,
    layer_index,
    load,
    parse_formats,
    parse_layer,
    parse_methods,
    parse_rows,
    resolve_device,
)
from attnflow.cli.inputs import (
    check_encoding,
    check_out,
    made,
    read_inputs,
    said_written,
    terminal_text,
    write_data,
    write_outputs,
)
from attnflow.cli.stdout import say
from attnflow.options import RECEPTIVE_FIELDS, SINK_CHOICES
from attnflow.schema import value_problem


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
    p.add_argument(
        "--model",
        required=True,
        help="hub name, local folder, 'minilm-sst2' (packaged sentiment classifier), 'minilm' (packaged MiniLM "
        "encoder, no head) or 'smollm2' (packaged SmolLM2-135M-Instruct, converted on first use)",
    )
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
    p.add_argument(
        "--sinks",
        choices=SINK_CHOICES,
        help="attention sinks of decoder LMs (default: auto for causal models, i.e. their attention moved "
        "to each row's own token; none for encoders): auto, diagonal, drop, or none (kept, with a warning)",
    )
    p.add_argument(
        "--receptive-field",
        choices=RECEPTIVE_FIELDS,
        default="none",
        help="receptive-field normalisation of causal maps",
    )
    p.add_argument(
        "--layers",
        help="comma-separated layers to compute (1 = the first, -1 = the last; default: all): long inputs "
        "need only the layers they look at",
    )
    p.add_argument("--merge-words", action="store_true", help="merge word pieces into words (scores summed)")
    p.add_argument(
        "--truncate", action="store_true", help="cut texts longer than the model takes instead of failing"
    )
    p.add_argument("--out", help="folder for the files (none written without it)")
    p.add_argument(
        "--format",
        help=f"comma-separated: {', '.join(FORMATS)} (default: {DEFAULT_FORMATS} for one input; {MANY_FORMATS} "
        "for several: a PNG takes longer to draw than its explanation, so name png to get one per input)",
    )
    p.add_argument(
        "--scale",
        choices=("uniform", "panel", "row"),
        default="uniform",
        help="PNG shading: each token's share of the method's strongest layer against the uniform share "
        "1/n, one scale for every layer (white at or below it; the rule of every attnflow picture), one "
        "0..max scale per method, or relative to each layer's largest score",
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


def _default_formats(n_inputs: int) -> str:
    """The --format of `n_inputs` texts: pictures for one; for several the page and the data only (a PNG
    takes longer to draw than its explanation: 20 texts of minilm-sst2 on 2 busy CPUs took 114 s with
    PNGs and 21 s without, measured back to back)."""
    return DEFAULT_FORMATS if n_inputs == 1 else MANY_FORMATS


def _png_name(i: int, n: int) -> str:
    return "explain.png" if n == 1 else f"explain_{i + 1:0{len(str(n))}d}.png"


def _summary(e: Any) -> str:
    from attnflow.display import row_text, sink_text

    computed = e.meta.get("layers")  # only some layers computed: the model's number of the one shown
    shown = computed[e.layer] + 1 if computed else e.layer + 1
    parts = [f"layer {shown}" + ("" if computed else f"/{e.num_layers}"), row_text(e)]
    if e.label is not None:
        parts.append(f"prediction: {e.label!r}" if isinstance(e.label, str) else f"prediction: {e.label}")
        if e.probability is not None:
            parts[-1] += f" (p = {e.probability:.2f})"
    if (sinks := sink_text(e)) is not None:  # decoders: what was done about attention sinks
        parts.append(sinks)
    return " · ".join(parts)


def cmd_explain(args: argparse.Namespace) -> int:
    methods = parse_methods(args.method)
    rows = parse_rows(args.rows)
    layer = parse_layer(args.layer)
    texts = read_inputs(args.text, args.file, encoding=check_encoding(args.encoding))
    formats = parse_formats(args.format or _default_formats(len(texts)))
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    if problem := value_problem("explain.residual", args.residual):  # the study's rule (attnflow.schema)
        raise CLIError(f"--residual {args.residual}: {problem}")
    if args.out is not None:
        check_out(args.out)

    _quiet_transformers()
    from attnflow.display import explanation_figure, explanation_item, removed_columns
    from attnflow.hf import AttentionUnavailableError, NoOutputHeadError, explain_texts, save_explanations
    from attnflow.hf.loading import model_layers
    from attnflow.viz import reference_mass, save_png, token_table, write_html

    device = resolve_device(args.device)
    model, tokenizer = load(args.model, device, quiet=args.quiet)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise CLIError(f"--model {args.model}: it takes images, not text (use attnflow.explain_image)")
    n_model = model_layers(model)
    chosen = None
    if args.layers is not None and n_model:
        asked = [x for x in args.layers.split(",") if x.strip()]
        chosen = sorted({int(layer_index(parse_layer(x.strip()), n_model)) for x in asked})
        if not chosen:
            raise CLIError(f"--layers {args.layers!r}: comma-separated layer numbers, e.g. 1,-1")
        shown = int(layer_index(layer, n_model))
        if shown not in chosen:
            if args.layer != "-1":
                raise CLIError(f"--layer {args.layer}: not among --layers {args.layers}")
            shown = chosen[-1]
        layer = chosen.index(shown) + 1  # its place among the layers computed, 1-based
    try:
        explanations = explain_texts(
            model, tokenizer, texts, methods=methods, layer=-1, rows=rows, residual=args.residual,
            merge=args.merge_words, truncate=args.truncate, batch_size=args.batch_size,
            progress=False if args.quiet else None, sinks=args.sinks, receptive_field=args.receptive_field,
            layers=chosen,
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
    failed: list[str] = []  # outputs that could not be made (the others still are)

    def write(out: Path, name: str) -> list[Path]:
        written: list[Path] = []

        def png(e: Any, path: Path) -> Path:
            return save_png(path, explanation_figure(e, methods=methods, name=name, scale=args.scale))

        if "png" in formats:
            for i, e in enumerate(explanations):
                path = out / _png_name(i, len(explanations))
                written += made(path, partial(png, e, path), failed)
        if "html" in formats:
            items = [explanation_item(e, methods=methods, name=name) for e in explanations]
            page = out / "explain.html"
            written += made(
                page, partial(write_html, page, items, title=f"attnflow explain · {name}"), failed
            )
        return written + write_data(save_explanations, explanations, out, "explain", formats, failed)

    written = write_outputs(args, write)  # files first: no reader of the tables can cost one
    show_table = args.table if args.table is not None else len(texts) <= TABLE_INPUTS
    if show_table and not args.quiet:
        for i, e in enumerate(explanations):
            text = terminal_text(e.text or "")
            head = f"[{i + 1}] {text}" if len(texts) > 1 else text
            scores = {m: e.scores(m) for m in methods}
            muted = sorted({*e.meta.get("special", []), *removed_columns(e)})  # a removed sink too
            title = f"{head}\n{terminal_text(_summary(e))}" + (
                "  (bars: share of the method's strongest layer against the uniform 1/n, empty at or below it"
                + ("; ░: special token, off the bar scale)" if muted else ")")
            )
            # bars on the scale of each method's whole map (every layer), as in the PNG and the page
            reference = {m: reference_mass(e.maps[m], muted) for m in methods}
            say(token_table(e.tokens, scores, title=title, muted=muted, reference=reference))
            say()
    return said_written(written, quiet=args.quiet, failed=failed, out=args.out)
