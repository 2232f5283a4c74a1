"""Rollout over generated tokens of a real small LM: first-token share and faithfulness per option."""

from __future__ import annotations

import pandas as pd

from attnflow.io import load_artifact, read_parquet

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..figures import plot_generation
from ..tables import Grid

OPTION = ["sinks", "receptive_field"]
PICTURE = ("long", ("diagonal", "none"), ("none", "none"))  # prompt, and the options drawn side by side


def section(ctx: Context) -> None:
    folder = ctx.paths.generation
    if not (folder / "shares.parquet").is_file():
        return
    shares, drops = read_parquet(folder / "shares.parquet"), read_parquet(folder / "faithfulness.parquet")
    completions = shares.drop_duplicates("prompt_name").set_index("prompt_name")["completion"]
    ctx.add(
        Heading("Generation: rollout over generated tokens of a decoder-only LM", 2),
        Paragraph(
            "SmolLM2-135M-Instruct (30 layers; the packaged GGUF), greedy completions: "
            + "; ".join(f"{name}: `{c.strip()[:60]}`" for name, c in completions.items())
            + ". Each generated token is explained by the row that predicted it, over the prompt. "
            "Sinks: `none`, or the attention-sink columns (found per head, shared by position) dropped or "
            "moved onto the diagonal; receptive field: `none`, `uniform` (divided by the rollout of uniform "
            "causal attention) or `column`. First-token share: mean over tokens and prompts, last layer."
        ),
    )
    share = shares.pivot_table(index=OPTION, columns="method", values="first_token_share", sort=False)
    ctx.add(Table(_grid(share, "first-token share", digits=3)))
    rand = drops[drops["method"] == "random"].groupby("k")["drop"].mean()
    ranked = drops[drops["method"] != "random"].pivot_table(
        index=[*OPTION, "k"], columns="method", values="drop", sort=False
    )
    caption = ("drop in log p(generated token) when the top-k prompt tokens of a ranking are deleted (nats; higher = the "
               "ranking found tokens the model needs); k random tokens: " + ", ".join(f"k={k}: {v:+.2f}" for k, v in rand.items()))  # fmt: skip
    ctx.add(Table(_grid(ranked, caption, digits=2, signed=True)))
    best = ranked.stack().idxmax()
    ctx.add(Paragraph(
        f"Most faithful ranking: {best[-1]} with sinks `{best[0]}`, receptive field `{best[1]}` (k={best[2]}: "
        f"{ranked.stack().max():+.2f} nats vs {rand.get(best[2], float('nan')):+.2f} for random tokens)."
    ))  # fmt: skip
    name, *options = PICTURE
    path = ctx.paths.generations / f"{name}.safetensors"
    if path.is_file():
        from attnflow.generate import load_generations

        grid = {
            (e.options["sinks"], e.options["receptive_field"]): e
            for e in load_artifact(path, load_generations, what="generations")
        }
        chosen = {o: grid[o] for o in options if o in grid}
        ctx.figure(plot_generation(chosen), f"generation_{name}.png", f"generation maps, {name} prompt",
                   caption="Per generated token (rows): the explanation over the prompt tokens, mean over layers, per option.")  # fmt: skip


def _grid(wide: pd.DataFrame, caption: str, *, digits: int, signed: bool = False) -> Grid:
    form = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    names = list(wide.index.names)
    rows = [
        [*map(str, key), *(form.format(v) if v == v else "n/a" for v in row)] for key, row in wide.iterrows()
    ]
    return Grid(header=[*names, *wide.columns], rows=rows, caption=caption)
