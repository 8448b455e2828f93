"""Speculative sampling: a draft model proposes, the target model accepts or corrects.

A small *draft* model proposes ``gamma`` tokens one after another; the large *target*
model then scores all of them in one call, which gives its distributions at the
``gamma + 1`` positions (after each prefix of the proposal). :func:`speculative_accept`
decides, by the rejection rule of Leviathan et al. (2023) and Chen et al. (2023), how many
of the proposed tokens to keep, and draws one more token, so that every emitted token is
distributed exactly as the target would have sampled it alone:

* token ``x_i`` proposed with draft probability ``q_i(x_i)`` is accepted with probability
  ``min(1, p_i(x_i) / q_i(x_i))`` (``p_i``: the target's distribution at that position);
* at the first rejection, a token is drawn from the residual distribution
  ``max(0, p_i - q_i) / sum(max(0, p_i - q_i))`` and the round ends;
* if all ``gamma`` are accepted, a bonus token is drawn from ``p_gamma``.

Each round therefore emits between 1 and ``gamma + 1`` tokens for one call of the target.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._backend import NUMPY, backend_of, check_floating, dtype_name, shape_of

__all__ = ["row_sum_tolerance", "speculative_accept"]


def _as_float64(name: str, x: Any) -> np.ndarray:
    check_floating(name, x)
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return x.detach().to("cpu").double().numpy()


def _precision(dtype: Any) -> tuple[float, float]:
    """``(eps, subnormal step)`` of a NumPy or torch floating dtype."""
    if isinstance(dtype, np.dtype) or not hasattr(dtype, "is_floating_point"):
        info = np.finfo(dtype)
        return float(info.eps), float(info.smallest_subnormal)
    info = sys.modules["torch"].finfo(dtype)
    return float(info.eps), float(info.tiny) * float(info.eps)   # 2^(e_min - p + 1)


def row_sum_tolerance(target_dtype: Any, draft_dtype: Any, vocab: int) -> float:
    """How far from 1 :func:`speculative_accept` lets a row of either distribution sum.

    ``tol = max(1e-6, 4 * eps + vocab * step / 2)``, where ``eps`` is the larger machine
    epsilon of the two dtypes and ``step`` the larger spacing of their subnormal numbers
    (the smallest positive subnormal). Both rows are checked against this one number.

    Why these terms. Rounding a distribution entry by entry to a dtype of unit roundoff
    ``u = eps / 2`` moves an entry ``p_j`` in the normal range by at most ``u p_j``, and
    one in the subnormal range by at most ``step / 2``, so the row sum moves by at most
    ``u + vocab * step / 2``: a correctly rounded row always passes. The factor 8 on
    ``u`` (``4 eps``) leaves room for a softmax computed in that dtype, whose exponentials,
    sum and division round a few times more. Anything further from 1 is not a rounded
    distribution but an unnormalised one, whose tokens would follow the wrong law: a
    bfloat16 row summing to 1.45 is refused (bfloat16's tolerance is 0.031), which a
    tolerance of 64 eps (0.5) did not do. The floor 1e-6 takes float64 and float32 rows
    computed in float32, as model outputs are, and is far below anything a sampling
    experiment could detect.

    Why the coarser dtype, for both arrays. The emitted tokens are drawn from ``p_target``
    and ``p_draft`` together (the acceptance ratio ``p / q``, the residual
    ``max(0, p - q)``), so their law is only as exact as the coarser of the two: a
    float64 ``p_target`` beside a float16 ``p_draft`` gains nothing from a check at
    float64's precision, while a correctly rounded float16 ``p_draft`` must pass.

    Parameters
    ----------
    target_dtype, draft_dtype : NumPy or torch floating dtypes
        Those of ``p_target`` and ``p_draft``.
    vocab : int
        The length of a row.

    Returns
    -------
    float
    """
    eps_t, step_t = _precision(target_dtype)
    eps_d, step_d = _precision(draft_dtype)
    return max(1e-6, 4 * max(eps_t, eps_d) + vocab * max(step_t, step_d) / 2)


def _check_distributions(name: str, p: np.ndarray, tol: float) -> None:
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name}: expected finite probabilities, got NaN or infinity")
    if p.size and p.min() < 0:
        raise ValueError(f"{name}: expected probabilities >= 0, got a minimum of "
                         f"{p.min():.3g}")
    sums = p.sum(axis=-1)
    bad = np.flatnonzero(np.abs(sums - 1) > tol)
    if bad.size:
        raise ValueError(f"{name}: expected each row to sum to 1 (within {tol:.2g}, "
                         f"attncore.speculative.row_sum_tolerance of the two dtypes), "
                         f"got row {bad[0]} summing to {sums[bad[0]]:.6g}")


def _draw(u: float, dist: np.ndarray) -> int:
    """Inverse-CDF draw from ``dist`` (non-negative, any positive total) with uniform ``u``.
    A token of probability 0 is never drawn."""
    cdf = np.cumsum(dist)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(dist) - 1))


def speculative_accept(p_target: Any, p_draft: Any, draft_tokens: Any, *,
                       generator: Any) -> Any:
    """The tokens a round of speculative sampling emits: accepted prefix, then one more.

    Parameters
    ----------
    p_target : array ``(gamma + 1, vocab)``, floating
        The target model's next-token distribution at each position: row ``i`` after the
        context and the first ``i`` draft tokens (row ``gamma``: after all of them).
    p_draft : array ``(gamma, vocab)``, floating
        The draft model's distributions from which ``draft_tokens`` were drawn, row ``i``
        for token ``i``.
    draft_tokens : integer array ``(gamma,)``
        The draft's proposal, each in ``[0, vocab)`` with ``p_draft[i, token] > 0``.
    generator : numpy.random.Generator or torch.Generator
        The source of the uniform draws (NumPy inputs take a NumPy generator, torch inputs
        a ``torch.Generator``): one per test of a draft token and one for the last token,
        so a seeded generator gives a deterministic result.

    Returns
    -------
    integer array ``(m,)``, ``1 <= m <= gamma + 1``, int64, in the inputs' library (and
    device)
        ``draft_tokens[:m - 1]`` followed by a token drawn from the residual distribution
        ``max(0, p_target[m-1] - p_draft[m-1])`` normalised (after a rejection) or from
        ``p_target[gamma]`` (when all were accepted, ``m = gamma + 1``). Each emitted
        token is distributed as the target's: for any ``i``, token ``i`` given the ones
        before it has law ``p_target[i]`` (Leviathan et al., 2023, Theorem 1).

    Raises
    ------
    TypeError
        Mixed libraries, non-floating probabilities, non-integer tokens, a generator of
        the wrong kind.
    ValueError
        Shapes that do not fit ``(gamma + 1, vocab)``, ``(gamma, vocab)``, ``(gamma,)``;
        probabilities that are negative, non-finite or whose rows do not sum to 1 within
        :func:`row_sum_tolerance` of the two dtypes; a token out of range or proposed
        with draft probability 0.

    Notes
    -----
    The arithmetic is done in float64 on the CPU for every input, so NumPy and torch
    inputs with generators that give the same uniforms give the same tokens. Where the
    residual is zero everywhere (``p_target`` row ``<= p_draft`` row, which with rows that
    sum to 1 means they are equal up to rounding, so a rejection has probability 0 but
    rounding made one happen) the token is drawn from ``p_target``'s row.
    """
    backend = backend_of(p_target=p_target, p_draft=p_draft, draft_tokens=draft_tokens)
    pt = _as_float64("p_target", p_target)
    pd = _as_float64("p_draft", p_draft)
    if isinstance(draft_tokens, np.ndarray):
        if not np.issubdtype(draft_tokens.dtype, np.integer):
            raise TypeError(f"draft_tokens: expected an integer array, got dtype "
                            f"{dtype_name(draft_tokens)}")
        raw = draft_tokens
    else:
        if draft_tokens.dtype.is_floating_point or draft_tokens.dtype.is_complex or \
                str(draft_tokens.dtype) == "torch.bool":
            raise TypeError(f"draft_tokens: expected an integer tensor, got dtype "
                            f"{dtype_name(draft_tokens)}")
        raw = draft_tokens.detach().to("cpu").numpy()
    # (range-checked in its own dtype before the cast to int64, which would wrap a
    # uint64 token above 2^63 - 1 round to a negative number)
    tokens = raw.astype(np.int64)
    if pt.ndim != 2 or pt.shape[0] < 1 or pt.shape[1] < 1:
        raise ValueError(f"p_target: expected shape (gamma + 1, vocab) with vocab >= 1, got "
                         f"{shape_of(p_target)}")
    gamma, vocab = pt.shape[0] - 1, pt.shape[1]
    if pd.shape != (gamma, vocab):
        raise ValueError(f"p_draft: expected shape (gamma, vocab) = ({gamma}, {vocab}) for "
                         f"p_target of shape {shape_of(p_target)}, got {shape_of(p_draft)}")
    if tokens.shape != (gamma,):
        raise ValueError(f"draft_tokens: expected shape (gamma,) = ({gamma},), got "
                         f"{shape_of(draft_tokens)}")
    if backend == NUMPY:
        if not isinstance(generator, np.random.Generator):
            raise TypeError(f"generator: expected a numpy.random.Generator for NumPy "
                            f"inputs (np.random.default_rng(seed)), got "
                            f"{type(generator).__name__}")

        def uniform() -> float:
            return float(generator.random())
    else:
        import torch

        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator: expected a torch.Generator for torch inputs "
                            f"(torch.Generator().manual_seed(seed)), got "
                            f"{type(generator).__name__}")

        def uniform() -> float:
            return float(torch.rand((), generator=generator, dtype=torch.float64,
                                    device=generator.device))
    tol = row_sum_tolerance(p_target.dtype, p_draft.dtype, vocab)
    _check_distributions("p_target", pt, tol)
    _check_distributions("p_draft", pd, tol)
    outside = (raw < 0) | (raw >= vocab)
    if outside.any():
        bad = int(raw[outside][0])
        raise ValueError(f"draft_tokens: expected tokens in [0, vocab={vocab}), got {bad}")
    q_of = pd[np.arange(gamma), tokens]
    if np.any(q_of <= 0):
        i = int(np.flatnonzero(q_of <= 0)[0])
        raise ValueError(f"draft_tokens: token {i} ({tokens[i]}) has draft probability "
                         f"p_draft[{i}, {tokens[i]}] = 0: the draft cannot have sampled it")
    emitted = []
    for i in range(gamma):
        x = tokens[i]
        # accept with probability min(1, p/q): u < p/q, written without the division
        if uniform() * q_of[i] < pt[i, x]:
            emitted.append(int(x))
            continue
        residual = np.maximum(pt[i] - pd[i], 0.0)
        emitted.append(_draw(uniform(), residual if residual.sum() > 0 else pt[i]))
        break
    else:
        emitted.append(_draw(uniform(), pt[gamma]))
    out = np.asarray(emitted, dtype=np.int64)
    if backend == NUMPY:
        return out
    import torch

    return torch.as_tensor(out, device=p_target.device)
