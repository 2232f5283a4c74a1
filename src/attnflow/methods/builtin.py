"""The records of attnflow's own methods (their implementations live in attnflow.explain and
attnflow.hf)."""

from __future__ import annotations

from . import MethodRecord

_EXPLAIN = "attnflow.explain.registry"

RECORDS = (
    MethodRecord("raw", "Raw", f"{_EXPLAIN}:raw_map", order=10,
                 summary="the heads' attention of each layer (Abnar & Zuidema 2020)"),
    MethodRecord("rollout", "Rollout", f"{_EXPLAIN}:rollout_map", order=20,
                 summary="attention with the residual, multiplied through the layers"),
    MethodRecord("flow", "Flow", f"{_EXPLAIN}:flow_map", order=30,
                 summary="max flow through the attention graph"),
    MethodRecord("chefer", "Chefer (generic)", f"{_EXPLAIN}:chefer_map", needs=("attn_grad",),
                 rows="classification", identity=True, options=("cls_self",), order=40,
                 summary="gradient-weighted attention relevance (Chefer et al., ICCV 2021)"),
    MethodRecord("chefer_lrp", "Chefer (LRP)", f"{_EXPLAIN}:chefer_lrp_map", needs=("attn_grad", "attn_relevance"),
                 rows="classification", generation=False, options=("cls_self",), order=50,
                 summary="LRP relevance through attention (Chefer et al., CVPR 2021)"),
    MethodRecord("attnlrp", "AttnLRP", "attnflow.hf.methods:_attnlrp", kind="model", study=False, signed=True,
                 generator="attnflow.attnlrp.maps:generation_maps", order=60,
                 summary="LRP through the whole transformer (Achtibat et al., ICML 2024)"),
)  # fmt: skip
