"""``attnflow generate``: rollout, flow and relevance of every token a decoder-only LM generates."""

from __future__ import annotations

import argparse
import math
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnflow.cli import common
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
from attnflow.methods import generation_methods
from attnflow.options import GENERATION_OVER, SINK_CHOICES
from attnflow.options import RECEPTIVE_FIELDS as RECEPTIVE_FIELD_CHOICES
from attnflow.schema import value_problem

if TYPE_CHECKING:
    from attnflow.generate.spec import GenerationSpec

GENERATE_METHODS = tuple(r.name for r in generation_methods())  # the method records (attnflow.methods)
GENERATED_ROWS_PER_PAGE = 40  # rows of one generation PNG page (keeps it under viz.MAX_PNG_PIXELS)


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
        formatter_class=common.HelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="hub name, local folder, or 'smollm2' (the packaged SmolLM2-135M-Instruct, converted on first use)",
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
        choices=GENERATION_OVER,
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
    p.add_argument(
        "--format", default=common.DEFAULT_FORMATS, help=f"comma-separated: {', '.join(common.FORMATS)}"
    )
    p.add_argument(
        "--scale",
        choices=("uniform", "panel", "row"),
        default="uniform",
        help="PNG shading: each token's share against the uniform share 1/n (white at or below it; "
        "the rule of every attnflow picture), one 0..max scale per method, or relative to each row's "
        "largest score",
    )
    p.add_argument(
        "--cache-dir", help="where 'smollm2' is converted on first use (default: ~/.cache/attnflow)"
    )
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (GPU when present)")
    p.add_argument("--quiet", action="store_true", help="no table")
    p.set_defaults(func=cmd_generate)


def _parse_ks(text: str | None) -> list[int]:
    if text is None:
        return []
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise common.CLIError(f"--faithfulness {text!r}: comma-separated whole numbers, e.g. 1,3") from None
    if not ks or min(ks) < 1:
        raise common.CLIError(f"--faithfulness {text!r}: comma-separated numbers >= 1, e.g. 1,3")
    return ks


# What each sampling option means, as (check, rule): a value outside is refused before the model loads.
SAMPLING_RULES = {
    "temperature": (lambda x: math.isfinite(x) and x > 0, "a finite number > 0"),
    "top_k": (lambda x: x >= 1, "a whole number >= 1"),
    "top_p": (lambda x: 0 < x <= 1, "a probability in (0, 1]"),
}


def _generate_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"do_sample": bool(args.sample)}
    for key in ("temperature", "top_k", "top_p"):
        value = getattr(args, key)
        if value is not None:
            option = f"--{key.replace('_', '-')}"
            if not args.sample:
                raise common.CLIError(f"{option} needs --sample (greedy decoding ignores it)")
            check, rule = SAMPLING_RULES[key]
            if not check(value):
                raise common.CLIError(f"{option} {value}: must be {rule}")
            kwargs[key] = value
    return kwargs


def _layer_text(layer: int | str, n_layers: int) -> str:
    return (
        f"mean over {n_layers} layers" if layer == "mean" else f"layer {int(layer) % n_layers + 1}/{n_layers}"
    )


def drop_reading(summary: dict[Any, dict[int, float]], methods: list[str]) -> str:
    """One line reading the log-prob drops against the random baseline ("" without one).

    The drop is log p(completion) lost when the k prompt tokens a method ranks highest are deleted;
    "random" deletes k random ones. Above random: the method's top tokens matter more than a random
    pick. Below random: deleting them costs less than deleting random tokens, so the ranking points
    away from what the completion rests on (attention sinks, function words): worse than guessing.

    >>> drop_reading({"rollout": {1: 0.114}, "chefer": {1: 0.9}, "random": {1: 0.432}}, ["rollout", "chefer"])
    'reading: a larger drop means the deleted tokens mattered more. Below random (rollout k=1): deleting the tokens it ranks highest costs less than deleting random ones, so its ranking points away from what the completion rests on, worse than guessing. Above random (chefer k=1): its top tokens matter more than a random pick.'
    """
    base = summary.get("random")
    if not base:
        return ""
    pairs = [(m, k) for m in methods if m in summary for k in summary[m] if k in base]
    below = [f"{m} k={k}" for m, k in pairs if summary[m][k] < base[k]]
    above = [f"{m} k={k}" for m, k in pairs if summary[m][k] >= base[k]]
    parts = ["reading: a larger drop means the deleted tokens mattered more"]
    if below:
        parts.append(
            f"Below random ({', '.join(below)}): deleting the tokens it ranks highest costs less than "
            "deleting random ones, so its ranking points away from what the completion rests on, worse "
            "than guessing"
        )
    if above:
        parts.append(f"Above random ({', '.join(above)}): its top tokens matter more than a random pick")
    return ". ".join(parts) + "."


def _options(args: argparse.Namespace) -> tuple[GenerationSpec, list[str], Any, Any, list[int]]:
    """(spec, prompts, formats, layer, ks) from the arguments, each refused in one line when wrong."""
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in methods if m not in GENERATE_METHODS]
    if bad or not methods:
        raise common.CLIError(
            f"unknown method {', '.join(bad) or repr(args.method)}; choose from {', '.join(GENERATE_METHODS)}"
        )
    methods = list(dict.fromkeys(methods))
    try:
        prompts = read_inputs(
            args.prompt, args.file, option="--prompt", encoding=check_encoding(args.encoding)
        )
    except common.CLIError as exc:
        if not str(exc).startswith("nothing to explain:"):
            raise
        raise common.CLIError(
            "nothing to complete: pass --prompt TEXT or --file FILE (one prompt per line)"
        ) from None
    formats = common.parse_formats(args.format)
    layer = common.parse_layer(args.layer, mean=True)
    ks = _parse_ks(args.faithfulness)
    if args.max_new_tokens < 1:
        raise common.CLIError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if problem := value_problem("explain.residual", args.residual):  # the study's rule (attnflow.schema)
        raise common.CLIError(f"--residual {args.residual}: {problem}")
    gen_kwargs = _generate_kwargs(args)
    if args.out is not None:
        check_out(args.out)
    from attnflow.generate.spec import GenerationSpec

    spec = GenerationSpec(
        max_new_tokens=args.max_new_tokens, methods=tuple(methods), sinks=args.sinks,
        receptive_field=args.receptive_field, over=args.over, residual=args.residual,
        generate_kwargs=gen_kwargs, seed=args.seed,
    )  # fmt: skip
    return spec, prompts, formats, layer, ks


def _generator(args: argparse.Namespace, prompts: list[str]) -> tuple[Any, Any]:
    """(model, tokenizer) of --model, refused in one line unless it is a decoder-only LM for these prompts."""
    common._quiet_transformers()
    from attnflow.hf import check_vocabulary

    device = common.resolve_device(args.device)
    model, tokenizer = common.load(args.model, device, cache=args.cache_dir, quiet=args.quiet)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise common.CLIError(f"--model {args.model}: it takes images, not text")
    can_generate = getattr(model, "can_generate", None)
    if not (callable(can_generate) and can_generate()) or getattr(model.config, "is_encoder_decoder", False):
        raise common.CLIError(
            f"--model {args.model}: {type(model).__name__} is not a decoder-only language model"
        )
    try:
        check_vocabulary(tokenizer, prompts)
    except ValueError as exc:
        raise common.CLIError(f"--model {args.model}: {exc}") from None
    return model, tokenizer


def _explain(args: argparse.Namespace, model: Any, spec: GenerationSpec, prompts: list[str], ks: list[int],
             tokenizer: Any) -> tuple[list[Any], list[Any]]:  # fmt: skip
    """(explanations, faithfulness checks), one per prompt."""
    from attnflow.generate import explain_generation, faithfulness
    from attnflow.hf import AttentionUnavailableError

    explanations = []
    checks = []
    for prompt in prompts:
        try:
            e = explain_generation(model, tokenizer, prompt, spec)
            explanations.append(e)
            usable = [k for k in ks if k < e.n_prompt]  # at least one prompt token must stay
            checks.append(faithfulness(model, e, ks=usable, seed=args.seed or 0) if usable else None)
        except AttentionUnavailableError as exc:
            raise common.CLIError(f"--model {args.model}: {exc}") from None
        except ValueError as exc:
            raise common.CLIError(str(exc)) from exc
        except TypeError as exc:  # a model without generate / logits
            raise common.CLIError(f"--model {args.model}: cannot generate with it ({exc})") from None

    for e in explanations:
        n = e.n_generated
        if not -n <= args.token < n:
            raise common.CLIError(
                f"--token {args.token}: the completion has {n} generated tokens (use 0..{n - 1})"
            )
    return explanations, checks


def cmd_generate(args: argparse.Namespace) -> int:
    spec, prompts, formats, layer, ks = _options(args)
    methods = list(spec.methods)
    model, tokenizer = _generator(args, prompts)
    explanations, checks = _explain(args, model, spec, prompts, ks, tokenizer)
    if explanations:  # one model: one layer count
        layer = common.layer_index(layer, explanations[0].num_layers)
    from attnflow.display import layer_labels
    from attnflow.generate.explanation import save_generations
    from attnflow.generate.result import TITLE_CHARS
    from attnflow.viz import page_slices, shorten, token_table, write_html, write_png

    failed: list[str] = []  # outputs that could not be made (the others still are)

    def write(out: Path, label: str) -> list[Path]:
        written: list[Path] = []
        many = len(explanations) > 1
        for i, e in enumerate(explanations):
            stem = f"generate_{i + 1:0{len(str(len(explanations)))}d}" if many else "generate"
            t = args.token % e.n_generated
            rows = [f"{k}: {tok}" for k, tok in enumerate(e.generated_tokens)]
            opts = f"sinks {e.options['sinks']} · receptive field {e.options['receptive_field']}"
            sub = f"{label} · {_layer_text(layer, e.num_layers)} · {opts}"
            columns = "prompt token" if e.options["over"] == "prompt" else "token"
            if "png" in formats:  # an output that cannot be made is named at the end, the rest written
                pages = page_slices(len(rows), GENERATED_ROWS_PER_PAGE)
                for k, page in enumerate(pages):
                    part = f" · generated tokens {page.start}-{page.stop - 1}" if len(pages) > 1 else ""
                    path = out / (f"{stem}.png" if len(pages) == 1 else f"{stem}_page{k + 1}.png")
                    written += made(path, partial(
                        write_png, path,
                        {m: e.matrix(m, layer)[page] for m in methods}, columns=e.column_labels(), rows=rows[page],
                        row_name="generated token", column_name=columns,
                        scale=args.scale, muted_columns=sorted({*e.special_columns, *e.removed_columns}),
                        title=f"“{shorten(e.prompt)}” → “{shorten(e.completion, 60)}”\n{sub}{part}",
                    ), failed)  # fmt: skip
                path = out / f"{stem}_token{t}.png"
                written += made(path, partial(
                    write_png, path, {m: e.maps[m][t].T for m in methods}, columns=e.column_labels(),
                    rows=layer_labels(e.num_layers), row_name="layer", column_name=columns, scale=args.scale,
                    muted_columns=sorted({*e.special_columns, *e.removed_columns}),
                    title=f"“{shorten(e.prompt)}” → {e.generated_tokens[t]!r} (generated token {t})\n{label} · {opts}",
                ), failed)  # fmt: skip
        if "html" in formats:
            items = [
                {
                    "title": f"{shorten(e.prompt, TITLE_CHARS)} → {shorten(e.completion, TITLE_CHARS)}",
                    "subtitle": f"{label} · {_layer_text(layer, e.num_layers)} · sinks {e.options['sinks']} · receptive field {e.options['receptive_field']}",
                    "columns": e.column_labels(),
                    "rows": [f"{k}: {tok}" for k, tok in enumerate(e.generated_tokens)],
                    "maps": {m: e.matrix(m, layer) for m in methods},
                    "row": args.token % e.n_generated,
                    "method": methods[-1],
                    "muted": sorted({*e.special_columns, *e.removed_columns}),
                }
                for e in explanations
            ]
            page = out / "generate.html"
            html = partial(
                write_html, page, items, title=f"attnflow generate · {label}", row_name="generated token"
            )
            written += made(page, html, failed)
        return written + write_data(save_generations, explanations, out, "generate", formats, failed)

    written = write_outputs(args, write)  # files first: no reader of the tables can cost one
    if not args.quiet:
        for i, (e, check) in enumerate(zip(explanations, checks, strict=True)):
            t = args.token % e.n_generated
            head = f"[{i + 1}] " if len(explanations) > 1 else ""
            sinks = e.options["sink_keys"] if e.options["sink_mode"] != "none" else "off"
            title = (
                f"{head}{e.prompt!r} -> {e.completion!r}\n"
                f"generated token {t}: {e.generated_tokens[t]!r} (row {e.rows[t]}) · {_layer_text(layer, e.num_layers)}"
                f" · sinks {e.options['sinks']} {terminal_text(str(sinks))} · receptive field {e.options['receptive_field']}"
            )
            scores = {m: e.scores(m, t, layer) for m in methods}
            say(token_table(e.columns, scores, title=title, muted=e.special_columns))
            share = ", ".join(f"{m} {float(e.first_token_share[m].mean()):.3f}" for m in methods)
            say(f"first-token share (last layer, mean over generated tokens): {share}")
            if check is not None:
                summary = check.summary()
                for k in sorted({r["k"] for r in check.records}):
                    cells = ", ".join(
                        f"{m} {summary[m][k]:+.3f}" for m in [*methods, "random"] if m in summary
                    )
                    say(f"log-prob drop, {k} prompt token(s) deleted (mean over generated tokens): {cells}")
                if reading := drop_reading(summary, methods):
                    say(reading)
            say()
    return said_written(written, quiet=args.quiet, failed=failed, out=args.out)
