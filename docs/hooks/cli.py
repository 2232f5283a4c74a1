"""mkdocs hook: the command line's help, written from its parser (attnflow.cli.build_parser).

The page holds the marker ``<!-- cli-help -->``; this hook replaces it with ``attnflow --help`` and
each verb's ``--help``, so the reference never drifts from the code. Building the parser imports
neither torch nor transformers.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

MARKER = "<!-- cli-help -->"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def cli_help() -> str:
    from attnflow.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal width: a fixed one for the page
    parser = build_parser()
    parts = [("attnflow", parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parts += [(f"attnflow {name}", sub.format_help()) for name, sub in action.choices.items()]
    return "\n\n".join(f"## `{name}`\n\n```text\n{text.rstrip()}\n```" for name, text in parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, cli_help()) if MARKER in markdown else markdown
