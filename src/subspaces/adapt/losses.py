"""The loss terms of the Matryoshka adapter, on one batch of input vectors X (B, D) and adapted vectors Y (B, D).

S = cos(x_i, x_j) is the teacher: the input's full-dimension similarities (no gradient). S_m = cos(y_i[:m],
y_j[:m]) are the adapted prefixes' similarities. Following Matryoshka-Adaptor (Yoon et al., EMNLP 2024)::

    L_pair(m) = mean_{i≠j} |S_m,ij − S_ij|                   every pair of the batch
    L_topk(m) = mean_i mean_{j ∈ kNN(i)} |S_m,ij − S_ij|      kNN(i): i's k nearest rows by S (itself excluded)
    L_rec     = mean_i ||y_i − x_i||² / ||x_i||²             the full vector stays close to its input

Ours, beside the paper's:

    L_rank(m) = mean_i KL(softmax(S_i / τ) || softmax(S_m,i / τ))  over j ≠ i: listwise self-distillation
    L_var(m)  = mean_k max(0, ρ − σ_k / σ̄)                  σ_k: batch std of dim k of unit(y[:m]); σ̄ their mean
    L_corr(m) = mean_{u ≤ m < v} max(0, |C_uv| − τ_corr)²     C: batch correlation of prefix dims with the rest
    L_sup(m)  = InfoNCE of unit(y_q[:m]) against unit(y_p[:m]) over the batch's positives (supervised pairs)

L_var and L_corr are MIC's soft-collapse terms read on vectors instead of token states (population variances).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from subspaces.vectors import normalize_rows


def cosine_matrix(x: Tensor) -> Tensor:
    unit = normalize_rows(x)
    return unit @ unit.T


def _off_diagonal(n: int, device: torch.device) -> Tensor:
    return ~torch.eye(n, dtype=torch.bool, device=device)


def pairwise_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean absolute difference of two similarity matrices over the off-diagonal pairs."""
    n = len(teacher)
    diff = (student - teacher).abs()
    # the whole sum less the diagonal: no boolean gather, whose backward is slow on large batches
    return (diff.sum() - diff.diagonal().sum()) / (n * (n - 1))


def neighbours(teacher: Tensor, k: int) -> Tensor:
    """Each row's ``k`` most similar other rows by ``teacher`` (B × k indices); k is capped at B − 1."""
    k = min(k, len(teacher) - 1)
    masked = teacher.masked_fill(~_off_diagonal(len(teacher), teacher.device), float("-inf"))
    return masked.topk(k, dim=1).indices


def topk_loss(student: Tensor, teacher: Tensor, index: Tensor) -> Tensor:
    """Mean absolute similarity difference over each row's teacher neighbours ``index`` (from :func:`neighbours`)."""
    return (student.gather(1, index) - teacher.gather(1, index)).abs().mean()


def rank_loss(student: Tensor, teacher: Tensor, temperature: float = 0.05) -> Tensor:
    """KL from the teacher's softmax similarity rows to the student's, the diagonal left out; 0 when they match."""
    diagonal = ~_off_diagonal(len(teacher), teacher.device)
    log_p = F.log_softmax((teacher / temperature).masked_fill(diagonal, float("-inf")), dim=1)
    log_q = F.log_softmax((student / temperature).masked_fill(diagonal, float("-inf")), dim=1)
    p = log_p.exp()
    # the diagonal has p = 0: its term is 0 (not 0 · (−inf − −inf) = NaN)
    return torch.where(diagonal, torch.zeros_like(p), p * (log_p - log_q)).sum(1).mean()


def reconstruction_loss(adapted: Tensor, inputs: Tensor) -> Tensor:
    return ((adapted - inputs).pow(2).sum(1) / inputs.pow(2).sum(1).clamp(min=1e-12)).mean()


def variance_floor(prefix: Tensor, floor: float = 0.5, eps: float = 1e-6) -> Tensor:
    """Hinge on each dimension's batch std of the unit prefix, relative to their mean: one collapsed dim counts."""
    std = torch.sqrt(normalize_rows(prefix).var(dim=0, unbiased=False) + eps)
    return F.relu(floor - std / std.mean()).mean()


def decorrelation(adapted: Tensor, dim: int, tau_corr: float = 0.1, eps: float = 1e-6) -> Tensor:
    """Squared hinge on the batch correlations of dims ``:dim`` with dims ``dim:`` (0 if ``dim`` is the full size)."""
    if dim >= adapted.shape[1]:
        return adapted.new_zeros(())
    centred = adapted - adapted.mean(0)
    z = centred / torch.sqrt(centred.pow(2).mean(0) + eps)
    cross = z[:, :dim].T @ z[:, dim:] / len(z)
    return F.relu(cross.abs() - tau_corr).pow(2).mean()


def supervised_loss(queries: Tensor, positives: Tensor, temperature: float = 0.05) -> Tensor:
    """In-batch InfoNCE: row i of ``queries`` should pick row i of ``positives`` among all of them."""
    logits = normalize_rows(queries) @ normalize_rows(positives).T / temperature
    return F.cross_entropy(logits, torch.arange(len(logits), device=logits.device))
