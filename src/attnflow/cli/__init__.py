"""The ``attnflow`` command line: explain a Hugging Face model's predictions from the terminal.

    attnflow explain --model minilm --text "a gripping, funny film" --method flow --out out/

Verbs are argparse sub-commands, each registered by an ``_add_<verb>(subparsers)`` function that
sets ``func`` (`attnflow.cli.explain`, `attnflow.cli.generate`); shared pieces (device choice,
model loading, output formats, the error type that exits with code 2) are helpers in
`attnflow.cli.common` and `attnflow.cli.inputs` that another verb can reuse. torch and
transformers are imported inside the verbs, so ``attnflow --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from attnflow.cli.common import CLIError, HelpFormatter
from attnflow.cli.explain import _add_explain
from attnflow.cli.generate import _add_generate
from attnflow.cli.inputs import terminal_text

# Names tests and scripts read from attnflow.cli.
from attnflow.cli.generate import GENERATE_METHODS as GENERATE_METHODS  # isort: skip
from attnflow.cli.generate import GENERATED_ROWS_PER_PAGE as GENERATED_ROWS_PER_PAGE  # isort: skip

__all__ = ["CLIError", "HelpFormatter", "build_parser", "main", "run"]


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
    """Run the command line; returns the exit code: 0 ok, 2 bad input, 1 an output that could not be
    made (a figure, a full stdout: every other output is complete), 141 the reader of stdout went
    away (``| head``; files complete, printing stopped quietly), 130 interrupted."""
    from attnflow.cli import stdout

    stdout.reset()  # a second call in one process starts with a working stdout again
    stdout.standard_streams()  # ``2>&-`` / ``>&-``: /dev/null in their place, before any file is opened
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("ATTNFLOW_DEBUG", "") not in ("", "0")
    try:
        with stdout.guarded_stderr():  # progress bars and warnings: a closed stderr costs nothing
            code = int(args.func(args) or 0)
        return stdout.finish(code, args.command)
    except CLIError as exc:
        if debug:
            raise
        stdout.tell(f"attnflow {args.command}: error: {terminal_text(str(exc))}")
        return stdout.finish(exc.code, args.command)
    except ModuleNotFoundError as exc:
        from attnflow._extras import extra_hint

        hint = extra_hint(exc.name)
        if debug or hint is None:
            raise
        stdout.tell(f"attnflow {args.command}: error: {exc.name!r} is not installed: {hint}")
        return 2
    except KeyboardInterrupt:
        stdout.tell("interrupted")
        return 130


def run() -> None:
    """The ``attnflow`` command (and ``python -m attnflow.cli``): `main`, then a quick exit.

    When `main` returns, every output is written and closed; what is left is the interpreter's
    teardown of torch and transformers (~0.9 s on 2 cores, a sixth of a first explanation). So the
    streams and log handlers are flushed and the process ends with os._exit. An exception still
    unwinds normally; ATTNFLOW_SLOW_EXIT=1 keeps the full teardown.
    """
    code = main()
    if os.environ.get("ATTNFLOW_SLOW_EXIT", "") not in ("", "0"):
        raise SystemExit(code)
    import logging

    try:  # a handler's stream set to None or closed since (a library's, on sys.stderr) costs no traceback
        logging.shutdown()
    except (OSError, ValueError, AttributeError):
        pass
    for stream in (sys.stdout, sys.stderr):
        try:  # main flushed stdout and said any failure; a stream gone since costs no traceback
            stream.flush()
        except (OSError, ValueError, AttributeError):  # AttributeError: a stream set to None since
            pass
    os._exit(code)
