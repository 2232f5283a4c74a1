"""Token-masking perturbations for captum's metrics on token-id inputs.

captum's default perturbations add noise to float inputs; token ids have no "nearby" value, so
here a perturbation replaces tokens by a mask token (as ferret's and ERASER's removal tests do).
For `captum.metrics.infidelity` the perturbation I is binary (1 = masked), the choice of Yeh et
al. (NeurIPS 2019) for global attributions: infidelity = E_I[(Iᵀ Φ − (f(x) − f(x̃)))²]. For
`captum.metrics.sensitivity_max` the perturb radius is the share of the maskable tokens masked.
Special tokens and padding (`protected_ids`) are never masked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["infidelity_masking", "mask_tokens", "sensitivity_masking"]


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    mask_id: int,
    rate: float,
    protected_ids: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(perturbation, perturbed ids): each maskable token is replaced by `mask_id` with probability
    `rate`; perturbation[b, t] = 1.0 where a token was replaced, else 0.0 (float32, like the ids).

    >>> ids = torch.tensor([[2, 5, 6, 3]])
    >>> mask_tokens(ids, mask_id=4, rate=1.0, protected_ids=[2, 3])
    (tensor([[0., 1., 1., 0.]]), tensor([[2, 4, 4, 3]]))
    >>> ids.tolist()  # the input is left as it was
    [[2, 5, 6, 3]]
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be a probability in [0, 1], got {rate!r}")
    if input_ids.dtype.is_floating_point:
        raise ValueError(f"input_ids must be integer token ids, got {input_ids.dtype}")
    maskable = ~torch.isin(input_ids, torch.as_tensor(list(protected_ids), dtype=input_ids.dtype,
                                                      device=input_ids.device))  # fmt: skip
    draw = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    hit = maskable & (draw < rate)  # (B, T)
    return hit.float(), input_ids.masked_fill(hit, mask_id)


def infidelity_masking(
    mask_id: int,
    *,
    rate: float = 0.25,
    protected_ids: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """A `perturb_func` for `captum.metrics.infidelity`: ids -> (binary perturbation, masked ids).

    >>> perturb = infidelity_masking(4, rate=1.0, protected_ids=[2, 3])
    >>> perturb(torch.tensor([[2, 5, 3]]))[1].tolist()
    [[2, 4, 3]]
    """

    def perturb(input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            input_ids, mask_id=mask_id, rate=rate, protected_ids=protected_ids, generator=generator
        )

    return perturb


def sensitivity_masking(
    mask_id: int,
    *,
    protected_ids: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> Callable[[torch.Tensor, float], torch.Tensor]:
    """A `perturb_func` for `captum.metrics.sensitivity_max`: (ids, perturb_radius) -> masked ids,
    each maskable token masked with probability perturb_radius.

    >>> sensitivity_masking(4, protected_ids=[2, 3])(torch.tensor([[2, 5, 3]]), 1.0).tolist()
    [[2, 4, 3]]
    """

    def perturb(input_ids: torch.Tensor, perturb_radius: float = 0.2) -> torch.Tensor:
        return mask_tokens(
            input_ids, mask_id=mask_id, rate=perturb_radius, protected_ids=protected_ids, generator=generator
        )[1]

    return perturb
