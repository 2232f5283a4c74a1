"""What every verb shares: output formats and defaults, `CLIError` (one line, exit code 2),
``--device`` / ``--method`` / ``--rows`` parsing, model loading and the help formatter.

torch and transformers are imported inside the functions, so ``attnflow --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from attnflow.options import HF_ROW_CHOICES as ROW_CHOICES

FORMATS = ("png", "html", "json", "safetensors")
DEFAULT_FORMATS = "png,html"
# Above this many inputs the default skips PNGs (one figure per input, ~0.3-0.7 s each) for JSON.
PNG_INPUTS = 50
MANY_FORMATS = "html,json"
DEFAULT_METHODS = "raw,rollout,flow"
# With more inputs than this, PNGs are still one per input but the terminal tables are off by default.
TABLE_INPUTS = 10


class CLIError(Exception):
    """A problem with the user's input: printed as one line, exit code 2, no traceback."""

    code = 2


class OutputError(CLIError):
    """An output that could not be made while every other one was (a figure that cannot be drawn, a
    page its writer refuses): one line naming it, exit code 1."""

    code = 1


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
    """Comma-separated method names, checked against the method records (attnflow.methods: the
    attention methods and the model-level ones, attnlrp, value_zeroing; a registered one too)
    without importing torch."""
    from attnflow.methods import EXPLAINERS, MODEL_METHODS

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


def load(name: str, device: str, *, cache: str | None = None, quiet: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer or image processor) for --model, with the errors a user can act on.

    Every verb resolves --model the same way (`attnflow.models.names.resolve_name`: "minilm",
    "minilm-sst2", "smollm2", a folder, a hub id); unless quiet, one line on stderr says what was
    loaded (class, family, layers, dtype, device)."""
    import sys

    from attnflow.hf import UnsafeCheckpointError
    from attnflow.hf.loading import load_described

    try:
        model, processor, line = load_described(name, device=device, cache=cache)
        if not quiet:
            print(f"attnflow: {line}", file=sys.stderr)
        return model, processor
    except (FileNotFoundError, UnsafeCheckpointError) as exc:
        raise CLIError(f"--model {name}: {exc}") from None
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CLIError(f"--model {name}: cannot load a model from it ({first})") from None
    except ImportError as exc:
        raise CLIError(f"--model {name}: {exc}") from None


def _quiet_transformers() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
    except ImportError:
        pass


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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where there is a default worth saying (not None / False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or isinstance(action, argparse.BooleanOptionalAction):
            return action.help or ""
        return super()._get_help_string(action)
