"""Reading the inputs (``--text``, ``--file``, stdin; their encodings), printing them safely to a
terminal, and checking the ``--out`` folder before any model is loaded.
"""

from __future__ import annotations

import codecs
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from attnflow.cli.common import CLIError


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


def _check_argument(text: str, option: str, which: str) -> None:
    """A command-line text whose bytes are not the terminal's encoding (Python keeps such a byte as a
    lone surrogate, which no tokenizer takes) is refused, naming the byte and its offset."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return
    encoding = sys.getfilesystemencoding()
    data = os.fsencode(text)  # the bytes as given on the command line
    try:
        data.decode(encoding)
    except UnicodeDecodeError as exc:
        offset, byte = exc.start, data[exc.start]
    else:  # escaped bytes that happen to form text (only from a Python caller): the first of them
        first = next(i for i, ch in enumerate(text) if "\udc80" <= ch <= "\udcff")
        offset, byte = len(os.fsencode(text[:first])), ord(text[first]) - 0xDC00
    shown = terminal_text(data.decode(encoding, "backslashreplace"))  # the bad byte as \\xNN
    raise CLIError(
        f"{option} '{shown}'{which}: not {encoding} text: byte offset {offset} is "
        f"0x{byte:02x}; pass the text as {encoding}, or put it in a file and pass --file with --encoding"
    )


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
        which = f" (the {_ordinal(i + 1)})" if len(texts or []) > 1 else ""
        _check_argument(text, option, which)
        if _blank(text):
            raise CLIError(
                f"{option} {terminal_text(repr(text))}{which}: {nothing} (empty or only whitespace)"
            )
        out.append(text)
    if file is not None:
        if file == "-":
            if _is_terminal(sys.stdin):  # a wait with no end in sight: say what it waits for
                from attnflow.cli.stdout import tell

                tell("reading inputs from standard input, one per line; end with Ctrl-D")
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


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


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


def write_data(
    save: Any, results: Sequence[Any], out: Path, verb: str, formats: Sequence[str], failed: list[str]
) -> list[Path]:
    """`save(results, out / "<verb>.<fmt>")` for each data format asked for (json, then safetensors),
    each through `made`."""
    paths = [out / f"{verb}.{fmt}" for fmt in ("json", "safetensors") if fmt in formats]
    return [p for path in paths for p in made(path, partial(save, results, path), failed)]


def write_outputs(args: Any, write: Callable[[Path, str], list[Path]]) -> list[Path]:
    """With ``--out``: ``write(folder, model name) -> written paths`` (none without it). Called before
    anything is printed, so no reader of stdout can cost a file. An OSError on the way (a disk may
    fill, a folder vanish after `check_out`) is one line naming the path."""
    if args.out is None:
        return []
    out = Path(args.out)
    try:
        return write(out, Path(args.model).name or args.model)
    except OSError as exc:
        raise _write_error(out, exc) from None


def made(path: Path, make: Callable[[], Path], failed: list[str]) -> list[Path]:
    """``[make()]``, or [] with `path` and the reason added to `failed` when this output cannot be
    made (a figure matplotlib cannot draw, a page or file its writer refuses): one output never
    costs the others. An OSError (the disk, the folder) still ends the command, naming the path."""
    try:
        return [make()]
    except OSError:
        raise
    except Exception as exc:  # whatever the plotting library or a writer raises for this output
        reason = (str(exc).strip().splitlines() or [""])[0][:120]
        failed.append(f"{path.name} ({type(exc).__name__}{': ' + reason if reason else ''})")
        return []


def said_written(written: Sequence[Path], *, quiet: bool, failed: Sequence[str] = (), out: Any = None) -> int:
    """Say on stderr which files were written (the first five, then a count; each path escaped as
    `terminal_text`); the exit code, 0. Outputs in `failed` end the command with `OutputError`
    (exit code 1) naming them, after the others are said."""
    from attnflow.cli.common import OutputError
    from attnflow.cli.stdout import tell

    if written and not quiet:
        shown = written if len(written) <= 6 else [*written[:5], f"... ({len(written)} files)"]
        tell("wrote " + ", ".join(terminal_text(str(p)) for p in shown))
    if failed:
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        raise OutputError(
            f"--out {out}: could not make {', '.join(failed[:3])}{more}; every other output is written"
        )
    return 0
