"""The records of attnflow's own methods. The attention methods' functions are in
`attnflow.explain.adapters` (on the method kit); AttnLRP's in `attnflow.attnlrp.maps`, imported on
first call (torch)."""

from __future__ import annotations

from typing import Any

from attnflow.explain import adapters as a

from . import MethodRecord


def attnlrp_maps(ctx: Any, valid: Any, positions: Any) -> list[Any]:
    """AttnLRP maps (L, T_b) per sample of one forward (`attnflow.attnlrp.maps.context_maps`)."""
    from attnflow.attnlrp.maps import context_maps

    return context_maps(ctx, valid, positions)


def attnlrp_generation(model: Any, run: Any) -> Any:
    """AttnLRP maps (n, L, T) of every generated token (`attnflow.attnlrp.maps.generation_maps`)."""
    from attnflow.attnlrp.maps import generation_maps

    return generation_maps(model, run)


RECORDS = (
    MethodRecord("raw", "Raw", a.raw_map, per_head=a.raw_heads, row_sums="one", figure=1, order=10,
                 summary="the heads' attention of each layer (Abnar & Zuidema 2020)"),
    MethodRecord("rollout", "Rollout", a.rollout_map, per_head=a.rollout_heads, row_sums="one", figure=2, order=20,
                 summary="attention with the residual, multiplied through the layers"),
    MethodRecord("flow", "Flow", a.flow_map, per_head=a.flow_heads, row_sums="one", figure=3, order=30,
                 summary="max flow through the attention graph"),
    MethodRecord("chefer", "Chefer (generic)", a.chefer_map, rows="classification", identity=True,
                 options=("cls_self",), authors_cls_self="zero", row_sums="identity_plus_nonnegative", order=40,
                 summary="gradient-weighted attention relevance (Chefer et al., ICCV 2021)"),
    MethodRecord("chefer_lrp", "Chefer (LRP)", a.chefer_lrp_map, rows="classification", generation=False,
                 options=("cls_self",), authors_cls_self="min", row_sums="one", order=50,
                 summary="LRP relevance through attention (Chefer et al., CVPR 2021)"),
    MethodRecord("attnlrp", "AttnLRP", attnlrp_maps, kind="model", study=False, signed=True,
                 generator=attnlrp_generation, order=60,
                 summary="LRP through the whole transformer (Achtibat et al., ICML 2024)"),
)  # fmt: skip
