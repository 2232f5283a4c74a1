"""``python -m attnflow.cli``: the same as the ``attnflow`` command."""

from attnflow.cli import run

run()
