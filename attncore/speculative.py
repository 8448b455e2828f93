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

:func:`speculative_decode` runs the rounds with a :class:`~attncore.LanguageModel` as the
target, verifying each proposal in one pass through its KV caches
(:func:`~attncore.lm_decode`) and forgetting the rejected positions
(:meth:`~attncore.KVCache.truncate`); the draft is any function that proposes tokens,
such as :func:`context_ngram_draft`, which copies what followed the last n-gram of the
context where it occurred before ("prompt lookup").
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, Callable, NamedTuple

import numpy as np

from ._backend import NUMPY, backend_of, check_floating, check_real, check_size, \
    dtype_name, shape_of
from .kvcache import KVCache
from .language_model import LanguageModel, _check_ids, lm_decode

__all__ = ["SpeculativeResult", "context_ngram_draft", "row_sum_tolerance",
           "speculative_accept", "speculative_decode"]


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


# --- decoding a language model speculatively -----------------------------------------------

def _token_array(name: str, tokens: Any) -> np.ndarray:
    """``tokens`` as a 1-D int64 NumPy array (from a list, an array or a tensor)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"{name}: expected integer tokens of shape (n,), got dtype "
                         f"{arr.dtype} and shape {arr.shape}")
    return arr.astype(np.int64)


def context_ngram_draft(tokens: Any, gamma: int, *, max_n: int = 3) -> np.ndarray:
    """A draft that copies the context: the tokens that followed the last n-gram before.

    For ``n = max_n, ..., 1``: if the last ``n`` tokens of ``tokens`` occurred earlier (an
    occurrence followed by at least one token), propose the up to ``gamma`` tokens that
    followed their latest earlier occurrence; the longest such ``n`` wins. Text that
    repeats its context (a quotation, an edit of a given text, code that reuses names)
    is proposed correctly at no cost: no model runs. ("Prompt lookup decoding", an
    n-gram model of the context whose next tokens are certain.)

    Parameters
    ----------
    tokens : integers, shape ``(t,)``
    gamma : int, ``>= 0``
        The most tokens to propose.
    max_n : int, ``>= 1``, default 3
        The longest n-gram to look up.

    Returns
    -------
    numpy.ndarray of int64, shape ``(m,)``, ``0 <= m <= gamma``
        The proposal (empty where no n-gram of the end occurred before).

    Raises
    ------
    ValueError
        Tokens that are not a 1-D integer array; ``gamma`` or ``max_n`` out of range.

    Examples
    --------
    >>> import attncore as ac
    >>> ac.context_ngram_draft([5, 6, 7, 8, 9, 5, 6], 2)
    array([7, 8])
    """
    tokens = _token_array("tokens", tokens)
    gamma = check_size("gamma", gamma, minimum=0)
    max_n = check_size("max_n", max_n)
    t = len(tokens)
    for n in range(min(max_n, t - 1), 0, -1):
        # windows tokens[j : j + n] with j + n <= t - 1: each is followed by a token
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
        found = np.flatnonzero((windows == tokens[t - n:]).all(axis=1))
        if found.size:
            start = int(found[-1]) + n
            return tokens[start:start + gamma].copy()
    return np.zeros(0, dtype=np.int64)


class SpeculativeResult(NamedTuple):
    """What :func:`speculative_decode` produced.

    A round cut by ``eos_id`` keeps only its tokens up to the end-of-sequence token: the
    drafted tokens after it, and the target's token after them, count as proposed (the
    pass scored them) but neither as kept nor as emitted.

    Attributes
    ----------
    tokens : numpy.ndarray of int64, shape ``(n0 + new,)``
        The prompt followed by the new tokens.
    target_calls : int
        Passes of the target model (one per round; the first also reads the prompt).
    proposed, accepted : list of int
        Per round, the drafted tokens proposed (the pass scored them all, and one
        position more) and how many of them were kept in ``tokens``.
    emitted : list of int, optional
        Per round, the tokens it added to ``tokens``: ``accepted + 1`` (the kept drafted
        tokens and the target's own token), or ``accepted`` for a round that ended on a
        drafted end-of-sequence token. None (for a result built by hand): taken to be
        ``accepted + 1`` in every round.
    """

    tokens: np.ndarray
    target_calls: int
    proposed: list[int]
    accepted: list[int]
    emitted: list[int] | None = None

    @property
    def acceptance_rate(self) -> float:
        """Drafted tokens kept over drafted tokens proposed (NaN if none was proposed)."""
        total = sum(self.proposed)
        return sum(self.accepted) / total if total else float("nan")

    @property
    def tokens_per_call(self) -> float:
        """New tokens kept per pass of the target (1 without speculation)."""
        emitted = self.emitted if self.emitted is not None else \
            [a + 1 for a in self.accepted]
        return sum(emitted) / self.target_calls if self.target_calls else float("nan")


def speculative_decode(model: LanguageModel, prompt_ids: Any, n_new: int, *,
                       draft: Callable[[np.ndarray, int], Any], gamma: int = 4,
                       temperature: float = 0.0, generator: Any = None,
                       eos_id: int | None = None) -> SpeculativeResult:
    """Continue a prompt by up to ``n_new`` tokens, drafted and verified by the target.

    Each round, ``draft(tokens, k)`` proposes up to ``k = min(gamma, tokens still to
    come - 1)`` tokens after ``tokens`` (the context so far); the target scores the
    proposal in **one** pass, :func:`~attncore.lm_decode` through one
    :class:`~attncore.KVCache` per block, which gives its next-token distribution at
    each of the ``m + 1`` positions; :func:`speculative_accept` keeps a prefix of the
    proposal and adds one token of the target's; the caches forget the rejected
    positions (:meth:`~attncore.KVCache.truncate`). A round emits between 1 and ``m + 1``
    tokens for one pass of the target.

    The draft is deterministic (its distribution puts all its mass on the token it
    proposes), so a token is accepted with the target's probability of it, and:

    * at ``temperature=0`` (greedy) a proposed token is kept exactly when it is the
      target's arg-max, and the output is the target's greedy continuation
      (:func:`~attncore.generate` with ``temperature=0``), up to the rounding by which a
      pass over several tokens differs from passes over one;
    * above 0, each token has the law of the target's own sampling at that temperature
      (Leviathan et al., 2023).

    Parameters
    ----------
    model : LanguageModel
        The target, NumPy or torch (no gradients are recorded).
    prompt_ids : integers, shape ``(n0,)``, ``n0 >= 1``
        One sequence, in ``[0, vocab_size)``.
    n_new : int, ``>= 0``; ``n0 + n_new <= max_len``
    draft : callable ``(tokens, k) -> integers (m,)``, ``0 <= m <= k``
        ``tokens`` the int64 context ``(t,)`` (a copy); e.g. :func:`context_ngram_draft`.
    gamma : int, ``>= 0``, default 4
        The most tokens a round proposes (0: plain decoding, one token per pass).
    temperature : real number ``>= 0``, default 0.0
    generator : numpy.random.Generator or torch.Generator, optional
        The source of :func:`speculative_accept`'s draws (the distributions are handed to
        it in this generator's library); None: a NumPy generator, seeded with 0 at
        ``temperature=0``, where the draws decide nothing.
    eos_id : int, optional
        Stop after this token has been emitted (keeping it).

    Returns
    -------
    SpeculativeResult
        The tokens, the target's passes, and per round the proposed, kept and emitted
        tokens (a round cut by ``eos_id`` keeps and emits its tokens up to that one).

    Raises
    ------
    TypeError, ValueError
        A model that is not a :class:`~attncore.LanguageModel`; a prompt that is not one
        sequence of ids in range; ``n_new``, ``gamma``, ``temperature`` or ``eos_id`` out of
        range; more than ``max_len`` positions; a draft that is not callable or proposes
        more than ``k`` tokens, or tokens outside the vocabulary; a generator of another
        kind.
    """
    ids = _check_ids(model, prompt_ids, "prompt_ids")
    torch = sys.modules.get("torch")
    prompt = ids.cpu().numpy() if model.backend != NUMPY else ids
    if prompt.ndim != 1 or prompt.shape[0] < 1:
        raise ValueError(f"prompt_ids: expected one sequence, shape (n0,) with n0 >= 1, got "
                         f"shape {prompt.shape}")
    n_new = check_size("n_new", n_new, minimum=0)
    gamma = check_size("gamma", gamma, minimum=0)
    temperature = check_real("temperature", temperature, minimum=0)
    n0, vocab = int(prompt.shape[0]), model.vocab_size
    if n0 + n_new > model.max_len:
        raise ValueError(f"n_new: expected n0 + n_new <= max_len={model.max_len}, got {n0} + "
                         f"{n_new}")
    if not callable(draft):
        raise TypeError(f"draft: expected a function (tokens, k) -> proposed tokens, such as "
                        f"attncore.context_ngram_draft, got {type(draft).__name__}")
    if eos_id is not None and (isinstance(eos_id, bool) or
                               not isinstance(eos_id, numbers.Integral) or
                               not 0 <= eos_id < vocab):
        raise ValueError(f"eos_id: expected None or a token in [0, {vocab}), got {eos_id!r}")
    if generator is None:
        generator = np.random.default_rng(0 if temperature == 0.0 else None)
    as_torch = not isinstance(generator, np.random.Generator)
    if as_torch and (torch is None or not isinstance(generator, torch.Generator)):
        raise TypeError(f"generator: expected a numpy.random.Generator or a torch.Generator, "
                        f"got {type(generator).__name__}")

    caches = [KVCache.for_layer(b.attn, n0 + n_new) for b in model.blocks]
    tokens = prompt.astype(np.int64)
    calls, proposed, accepted, emitted_per_round = 0, [], [], []
    grad = torch.no_grad() if model.backend != NUMPY else None
    while len(tokens) < n0 + n_new:
        k = min(gamma, n0 + n_new - len(tokens) - 1)
        proposal = _token_array("draft", draft(tokens.copy(), k))
        if len(proposal) > k:
            raise ValueError(f"draft: expected at most k={k} proposed tokens, got "
                             f"{len(proposal)}")
        if proposal.size and (proposal.min() < 0 or proposal.max() >= vocab):
            raise ValueError(f"draft: expected tokens in [0, {vocab}), got "
                             f"[{proposal.min()}, {proposal.max()}]")
        m = len(proposal)
        feed = np.concatenate([tokens[len(caches[0]):], proposal])
        if grad is not None:
            with grad:
                logits = lm_decode(model, feed, caches)[-(m + 1):]
            logits = logits.detach().cpu().double().numpy()
        else:
            logits = np.asarray(lm_decode(model, feed, caches)[-(m + 1):], dtype=np.float64)
        calls += 1
        if temperature == 0.0:
            p = np.zeros_like(logits)
            p[np.arange(m + 1), logits.argmax(axis=-1)] = 1.0
        else:
            z = (logits - logits.max(axis=-1, keepdims=True)) / temperature
            p = np.exp(z)
            p /= p.sum(axis=-1, keepdims=True)
        q = np.zeros((m, vocab))
        q[np.arange(m), proposal] = 1.0
        if as_torch:
            p, q, proposal_in = (torch.from_numpy(a) for a in (p, q, proposal))
        else:
            proposal_in = proposal
        emitted = np.asarray(speculative_accept(p, q, proposal_in, generator=generator))
        kept = len(emitted) - 1
        for cache in caches:               # the context and the kept proposal, not the rest
            cache.truncate(len(tokens) + kept)
        stop = eos_id is not None and bool((emitted == eos_id).any())
        if stop:                           # nothing after the end-of-sequence token counts
            emitted = emitted[:int(np.argmax(emitted == eos_id)) + 1]
            kept = min(kept, len(emitted))
        proposed.append(m)
        accepted.append(kept)
        emitted_per_round.append(len(emitted))
        tokens = np.concatenate([tokens, emitted.astype(np.int64)])
        if stop:
            break
    return SpeculativeResult(tokens, calls, proposed, accepted, emitted_per_round)
