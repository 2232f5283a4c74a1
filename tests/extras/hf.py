"""[hf]: explain a Hugging Face classifier (a tiny random BERT), as a table, a picture and by the CLI."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _tiny import TEXT, tiny_bert

    from attnflow import explain_text, load_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_bert(Path(tmp) / "bert")
        model, tokenizer = load_model(str(folder))
        e = explain_text(model, tokenizer, TEXT, methods=["rollout", "flow", "chefer"])
        frame = e.to_pandas()  # pandas: one row per (method, layer, token)
        assert set(frame["method"]) == {"rollout", "flow", "chefer"}, frame.head()
        e.plot().savefig(Path(tmp) / "map.png")  # matplotlib
        out = Path(tmp) / "out"
        cli = [sys.executable, "-m", "attnflow.cli", "explain", "--model", str(folder), "--text", TEXT,
               "--method", "rollout,flow", "--out", str(out)]  # fmt: skip
        subprocess.run(cli, check=True)
        assert (out / "explain.html").is_file(), sorted(p.name for p in out.iterdir())
    print(f"[hf] ok: {len(frame)} rows, prediction {e.prediction} (p={e.probability:.2f})")


if __name__ == "__main__":
    main()
