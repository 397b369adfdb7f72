"""Set-level diversity of a group's descriptor vectors: TJPO's per-trajectory credits and the evaluation metrics.

Every numerical rule is ALGORITHMS.md's (TJPO): σ = 10, jitter η = 1e-4, determinant floor 1e-10, the two
determinantal fallbacks, max-scaling of determinantal credits, z-scoring within the group (unbiased std, as
everywhere in agentforge), and 0 for a group whose credits do not vary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agentforge.algorithms.descriptors import describe_group, get_descriptor
from agentforge.types import Group

SIGMA = 10.0
ETA = 1e-4
DET_FLOOR = 1e-10
FUNCTIONALS = ("pairwise", "determinantal")


def squared_distances(vectors: np.ndarray) -> np.ndarray:
    """(n, n) squared Euclidean distances, exactly 0 on the diagonal and never negative."""
    vectors = np.asarray(vectors, dtype=np.float64)
    diff = vectors[:, None, :] - vectors[None, :, :]
    return np.einsum("ijk,ijk->ij", diff, diff)


def rbf_kernel(vectors: np.ndarray, sigma: float = SIGMA) -> np.ndarray:
    """K_ij = exp(−‖φ_i − φ_j‖² / (2σ²))."""
    return np.exp(-squared_distances(vectors) / (2.0 * sigma * sigma))


# ---- credits (training) ------------------------------------------------------------------------------------------
def pairwise_credit(vectors: np.ndarray) -> np.ndarray:
    """c_i = mean_{j≠i} ‖φ_i − φ_j‖₂; a group of one gets 0."""
    n = len(vectors)
    if n < 2:
        return np.zeros(n)
    distances = np.sqrt(squared_distances(vectors))
    return distances.sum(axis=1) / (n - 1)


FALLBACKS = ("kernel_distance", "unit_credit")  # which determinantal fallback decided a group's credits


def determinantal_credit(
    vectors: np.ndarray, sigma: float = SIGMA, eta: float = ETA, det_floor: float = DET_FLOOR
) -> np.ndarray:
    """c_i = det(L) / det(L_{−i}) with L = K + ηI (the volume τ_i adds to the others), divided by the group's max.
    See `determinantal_credit_detail` for the fallbacks."""
    return determinantal_credit_detail(vectors, sigma, eta, det_floor)[0]


def determinantal_credit_detail(
    vectors: np.ndarray, sigma: float = SIGMA, eta: float = ETA, det_floor: float = DET_FLOOR
) -> tuple[np.ndarray, str | None]:
    """The determinantal credits and which fallback decided them (None: the determinant ratio itself).

    Fallbacks: when det(L) ≤ floor (`kernel_distance`: near-duplicate descriptors) c_i = mean_{j≠i} (1 − K_ij);
    when only some det(L_{−i}) ≤ floor (`unit_credit`) those c_i = 1 (τ_i alone restores a volume the others lack).
    Since det(L) = det(L_{−i})·(Schur complement ≤ 1 + η), the second only fires when det(L) lies in
    (floor, (1 + η)·floor]: a numerical guard kept because the rule says so. Max-scaling is skipped when the
    maximum is 0.

    Why the first fallback decides almost every group at σ = 10: descriptors are ℓ1-normalised (points of the
    simplex, ‖φ_i − φ_j‖² ≤ 2), so every K_ij ≥ exp(−2 / (2·10²)) = e^−0.01 ≈ 0.990. L is then one eigenvalue ≈ n
    plus n − 1 eigenvalues of η plus at most ~0.01 each, and det(L) ≲ n·0.01^(n−1) drops below 1e-10 from about 5-7
    members whatever the trajectories did (docs/tjpo.md). A smaller `sigma` (e.g. 0.3) keeps distinct descriptors
    above the floor; exact duplicates still add an eigenvalue of η each, at any σ.
    """
    n = len(vectors)
    if n == 0:
        return np.zeros(0), None
    kernel = rbf_kernel(vectors, sigma)
    gram = kernel + eta * np.eye(n)
    det_all = float(np.linalg.det(gram))
    fallback: str | None = None
    if det_all <= det_floor:
        credit = (1.0 - kernel).sum(axis=1) / (n - 1) if n > 1 else np.zeros(1)
        fallback = FALLBACKS[0]
    else:
        # det(L₋ᵢ) = det(L)·(L⁻¹)ᵢᵢ (Cramer), so all n minors come from one inverse instead of n determinants.
        det_rest = det_all * np.diag(np.linalg.inv(gram)) if n > 1 else np.ones(1)
        small = det_rest <= det_floor
        credit = np.where(small, 1.0, det_all / np.maximum(det_rest, np.finfo(float).tiny))
        fallback = FALLBACKS[1] if small.any() else None
    top = credit.max()
    return (credit / top if top > 0 else credit), fallback


def zscore(credit: np.ndarray, tolerance: float = 1e-12) -> np.ndarray:
    """(c − mean) / std (unbiased) within a group; a group of one, or whose credits do not vary, gets all 0."""
    credit = np.asarray(credit, dtype=np.float64)
    if credit.size < 2:
        return np.zeros_like(credit)
    std = credit.std(ddof=1)
    if std <= tolerance * max(1.0, float(np.abs(credit).max())):
        return np.zeros_like(credit)
    return (credit - credit.mean()) / std


def group_credit(
    vectors: np.ndarray, functional: str, participants: np.ndarray | None = None,
    sigma: float = SIGMA, eta: float = ETA,
) -> np.ndarray:
    """Standardised credit ĉ per trajectory of one group; trajectories outside `participants` (a mask) get 0."""
    return group_credit_detail(vectors, functional, participants, sigma, eta)[0]


def group_credit_detail(
    vectors: np.ndarray, functional: str, participants: np.ndarray | None = None,
    sigma: float = SIGMA, eta: float = ETA,
) -> tuple[np.ndarray, str | None]:
    """`group_credit` plus the determinantal fallback that decided it (None: none, or the pairwise functional)."""
    n = len(vectors)
    mask = np.ones(n, dtype=bool) if participants is None else np.asarray(participants, dtype=bool)
    out = np.zeros(n)
    members = vectors[mask] if n else vectors
    fallback: str | None = None
    if functional == "pairwise":
        raw = pairwise_credit(members)
    elif functional == "determinantal":
        raw, fallback = determinantal_credit_detail(members, sigma, eta)
    else:
        raise ValueError(f"unknown diversity functional {functional!r}; valid: {', '.join(FUNCTIONALS)}")
    out[mask] = zscore(raw)
    return out, fallback


# ---- set diversity (evaluation) ------------------------------------------------------------------------------------
def pairwise_diversity(vectors: np.ndarray) -> float:
    """D^pair: mean Euclidean distance over the unordered pairs of a set; NaN for fewer than two members."""
    n = len(vectors)
    if n < 2:
        return math.nan
    distances = np.sqrt(squared_distances(vectors))
    return float(distances[np.triu_indices(n, k=1)].mean())


def dpp_diversity(vectors: np.ndarray, sigma: float = SIGMA, eta: float = ETA) -> float:
    """D^dpp = det(K_S + ηI)^(1/|S|) (raw; tables report it ×10⁻³); NaN for fewer than two members."""
    n = len(vectors)
    if n < 2:
        return math.nan
    sign, logdet = np.linalg.slogdet(rbf_kernel(vectors, sigma) + eta * np.eye(n))
    return float(math.exp(logdet / n)) if sign > 0 else 0.0


def group_diversity(
    groups: Sequence[Group], descriptor_names: Sequence[str], successful_only: bool = True,
    sigma: float = SIGMA, eta: float = ETA,
) -> dict[str, float]:
    """Mean D^pair and D^dpp per descriptor over the groups (prompts) with at least two (successful) trajectories.

    Keys: `div_pair/<name>`, `div_dpp/<name>` (NaN when no group qualifies) and `div_groups/<name>` (how many
    groups contributed). Groups with fewer than two successes contribute nothing (project choice).
    """
    out: dict[str, float] = {}
    for name in descriptor_names:
        descriptor = get_descriptor(name)
        pair, dpp = [], []
        for group in groups:
            members = [t for t in group.trajectories if t.won or not successful_only]
            if len(members) < 2:
                continue
            vectors = describe_group(descriptor, members)
            pair.append(pairwise_diversity(vectors))
            dpp.append(dpp_diversity(vectors, sigma, eta))
        out[f"div_pair/{name}"] = float(np.mean(pair)) if pair else math.nan
        out[f"div_dpp/{name}"] = float(np.mean(dpp)) if dpp else math.nan
        out[f"div_groups/{name}"] = float(len(pair))
    return out


def diversity_summary(groups: list[Group], descriptor_names: list[str]) -> dict[str, float]:
    """D^pair and D^dpp per descriptor over each group's successful rollouts; metrics no group qualified for are left
    out (NaN would break curves), the count of contributing groups is always there."""
    if not descriptor_names or all(len(g.trajectories) < 2 for g in groups):
        return {}
    return {k: v for k, v in group_diversity(groups, descriptor_names).items() if not math.isnan(v)}
