"""One small example per extra of pyproject.toml, run by noxfile.py's `alone-<extra>` sessions in a fresh
virtual environment holding only the built wheel and that extra: `python tests/extras/<extra>.py`.
Each is offline (tiny random models built on the spot, or the models packaged in a wheel)."""
