"""The gated delta rule (Gated DeltaNet): linear attention whose memory is edited, not only
added to.

Causal linear attention with the identity feature map keeps one matrix per head,
``S_t = S_{t-1} + v_t k_t^T``, and reads it with ``o_t = S_t q_t``. Every token adds to
``S``; nothing is ever removed, so after many tokens a key ``k`` recalls the sum of all the
values ever stored under keys similar to it. The **delta rule** (Schlag et al., 2021;
Yang et al., 2024) first reads what ``S`` holds under ``k_t`` and replaces it::

    S_t = S_{t-1} - beta_t (S_{t-1} k_t - v_t) k_t^T
        = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,

one step of gradient descent, of size ``beta_t``, on the regression loss
``1/2 |S k_t - v_t|^2``: with a unit key and ``beta_t = 1`` the memory then returns
exactly ``v_t`` for ``k_t``. **Gated DeltaNet** (Yang, Kautz and Hatamizadeh, 2025) adds
a forget gate ``g_t in (0, 1]`` that decays the whole memory first::

    S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,     o_t = S_t q_t.

This is the recurrent layer of Qwen3-Next and Kimi Linear (three of them to one layer of
full attention). Models L2-normalise ``q`` and ``k`` per head (then ``I - beta k k^T``
has eigenvalues ``1 - beta`` and 1, and the state cannot grow); this module does not,
so that any input can be checked against the formula.

* :func:`gated_delta_rule`      -- a whole sequence, recurrently (``chunk_size=None``: one
  token at a time, the formula above), or in chunks (the WY form below: matrix products
  within each chunk, the recurrence only from chunk to chunk); both give the same output
* :func:`gated_delta_rule_step` -- one token: the state in, the output and the new state out

With ``erase=False`` both drop the erase term: ``S_t = g_t S_{t-1} + beta_t v_t k_t^T``
(gated linear attention); with ``g = beta = 1`` too, this is the numerator of
:func:`~attncore.linear_attention` with ``causal=True`` on features ``phi(q), phi(k)``
(and its denominator is the same recurrence with values 1).

**The chunked form.** Within a chunk of ``C`` tokens that starts from the state ``S_0``,
let ``gamma_t = g_1 ... g_t`` (``gamma_0 = 1``). By induction on ``t``, ::

    S_t = gamma_t S_0 + sum_{i <= t} (gamma_t / gamma_i) u_i k_i^T,
    u_t = beta_t (v_t - gamma_t S_0 k_t - sum_{i < t} (gamma_t / gamma_i) (k_i . k_t) u_i)

(``u_t`` is ``beta_t`` times the error of the memory just before token ``t``, decayed by
``g_t``). With ``A`` strictly lower triangular, ``A_ti = beta_t (gamma_t / gamma_i)
(k_t . k_i)``, the ``u``'s solve the unit lower-triangular system ::

    (I + A) U = diag(beta) V - diag(beta gamma) K S_0^T,   i.e.   U = U' - W S_0^T,
    U' = T diag(beta) V,   W = T diag(beta gamma) K,   T = (I + A)^{-1}

(the UT transform: ``W`` and ``U'`` do not depend on ``S_0``, so every chunk computes them
at once, by forward substitution; the WY representation of the product of the
``I - beta k k^T``). Then the chunk's outputs and final state are matrix products::

    O   = diag(gamma) Q S_0^T + (M * Q K^T) U,     M_ti = gamma_t / gamma_i  (i <= t, else 0)
    S_C = gamma_C S_0 + U^T diag(gamma_C / gamma) K.

Every decay ratio ``gamma_t / gamma_i`` with ``i <= t`` is at most 1, and is computed as
``exp(log gamma_t - log gamma_i)``, so nothing overflows however small the gates.

NumPy arrays and torch tensors (on their own device, differentiable) alike; float16 and
bfloat16 are computed in float32 and rounded back.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any

import numpy as np

from ._backend import (
    backend_of,
    check_all_finite,
    check_attention_inputs,
    check_flag,
    check_floating,
    check_min_rank,
    check_same_dtype,
    check_size,
    dtype_name,
    is_torch_tensor,
    shape_of,
    under_vmap,
)

__all__ = ["gated_delta_rule", "gated_delta_rule_step"]


def _xp(x: Any) -> Any:
    return np if isinstance(x, np.ndarray) else sys.modules["torch"]


def _work(x: Any) -> Any:
    """float16 and bfloat16 are computed in float32."""
    if x is None or x.dtype.itemsize != 2:
        return x
    return x.astype(np.float32) if isinstance(x, np.ndarray) else x.float()


def _back(x: Any, dtype: Any) -> Any:
    return x.astype(dtype, copy=False) if isinstance(x, np.ndarray) else x.to(dtype)


# --- checks ---------------------------------------------------------------------------------

def _check_gate(name: str, x: Any, shape: tuple[int, ...], like: Any, low_open: bool) -> Any:
    """A gate (``g`` or ``beta``): an array of ``shape`` in ``like``'s library, device and
    dtype, or a real number (the same for every entry); values in ``(0, 1]`` for
    ``low_open`` (``g``), else ``[0, 1]`` (``beta``). Returns an array of ``shape``."""
    interval = "(0, 1]" if low_open else "[0, 1]"
    if isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)):
        value = float(x)
        if not ((0 < value) if low_open else (0 <= value)) or not value <= 1:
            raise ValueError(f"{name}: expected values in {interval}, got {x!r}")
        if isinstance(like, np.ndarray):
            rounded = float(np.asarray(value, dtype=like.dtype))
        else:
            rounded = float(sys.modules["torch"].tensor(value, dtype=like.dtype))
        if low_open and not rounded > 0:
            # A gate that rounds to 0 in the inputs' dtype is a gate of 0, outside (0, 1]
            # (as an array of such gates is), and log 0 would turn the chunked form's decay
            # ratios into NaN.
            raise ValueError(f"{name}: expected values in {interval}, got {x!r}, which "
                             f"rounds to 0 in q's dtype {dtype_name(like)}")
        if isinstance(like, np.ndarray):
            return np.full(shape, value, dtype=like.dtype)
        return like.new_full(shape, value)
    if not (isinstance(x, np.ndarray) or is_torch_tensor(x)):
        raise TypeError(f"{name}: expected a real number or an array of shape {shape}, "
                        f"got {type(x).__name__}")
    backend_of(q=like, **{name: x})
    check_floating(name, x)
    if x.dtype != like.dtype:
        raise TypeError(f"{name}: expected the dtype of q, {dtype_name(like)}, got "
                        f"{dtype_name(x)}")
    if shape_of(x) != shape:
        raise ValueError(f"{name}: expected shape {shape} (one gate per token: the shape "
                         f"of q without its last axis), got {shape_of(x)}")
    if not under_vmap(x):
        # (written so that NaN fails: every comparison with NaN is False)
        ok = ((x > 0) if low_open else (x >= 0)) & (x <= 1)
        if not bool(ok.all()):
            bad = x[~ok]
            raise ValueError(f"{name}: expected values in {interval}, got "
                             f"{float(bad.reshape(-1)[0])!r}")
    return x


def _check_state(state: Any, batch: tuple[int, ...], d_v: int, d_k: int, like: Any,
                 name: str = "state") -> Any:
    """``state`` of shape ``batch + (d_v, d_k)`` in ``like``'s library, device, dtype; None
    gives zeros."""
    want = batch + (d_v, d_k)
    if state is None:
        if isinstance(like, np.ndarray):
            return np.zeros(want, dtype=like.dtype)
        return like.new_zeros(want)
    if not (isinstance(state, np.ndarray) or is_torch_tensor(state)):
        raise TypeError(f"{name}: expected None or an array of shape (..., d_v, d_k) = "
                        f"{want}, got {type(state).__name__}")
    backend_of(q=like, **{name: state})
    check_floating(name, state)
    if state.dtype != like.dtype:
        raise TypeError(f"{name}: expected the dtype of q, {dtype_name(like)}, got "
                        f"{dtype_name(state)}")
    if shape_of(state) != want:
        raise ValueError(f"{name}: expected shape (..., d_v, d_k) = {want}, got "
                         f"{shape_of(state)}")
    if not under_vmap(state):
        check_all_finite(**{name: state})
    return state


def _check_overflow(out: Any, state: Any, k: Any, beta: Any) -> None:
    """Raise ``ValueError`` if the result overflowed (its inputs were checked finite).

    The only way a finite input gives a non-finite result is a state that grows: with
    ``beta_t |k_t|^2 > 2`` the map ``I - beta_t k_t k_t^T`` has an eigenvalue below -1, and
    the state grows geometrically (models L2-normalise ``k``, which keeps it below 2).
    """
    xp = _xp(out)
    if bool(xp.isfinite(out).all()) and bool(xp.isfinite(state).all()):
        return
    k, beta = _work(k), _work(beta)
    gain = beta * (k * k).sum(-1)                         # beta_t |k_t|^2, shape (..., n)
    worst = float(gain.max()) if math.prod(shape_of(gain)) else 0.0
    why = (f"beta_t |k_t|^2 reaches {worst:.3g} > 2, where I - beta k k^T has an "
           f"eigenvalue below -1 and the state grows at every such token: L2-normalise "
           f"k per head (as models do), or lower beta" if worst > 2 else
           "the state grew beyond the dtype's range")
    raise ValueError(f"k, beta: the gated delta rule's state overflowed {dtype_name(out)} "
                     f"to NaN or infinity: {why}")


# --- one token ------------------------------------------------------------------------------

def _step(s: Any, q: Any, k: Any, v: Any, g: Any, beta: Any, erase: bool) -> tuple[Any, Any]:
    """One token of the recurrence (unchecked): ``s`` ``(..., d_v, d_k)``, ``q, k``
    ``(..., d_k)``, ``v`` ``(..., d_v)``, ``g, beta`` ``(...)``."""
    s = g[..., None, None] * s                            # forget: g_t S_{t-1}
    if erase:
        # S (I - beta k k^T) + beta v k^T = S + beta (v - S k) k^T: O(d_v d_k), no I
        u = beta[..., None] * (v - (s @ k[..., :, None])[..., 0])
    else:
        u = beta[..., None] * v
    s = s + u[..., :, None] * k[..., None, :]
    return (s @ q[..., :, None])[..., 0], s


def gated_delta_rule_step(state: Any, q_t: Any, k_t: Any, v_t: Any, g_t: Any, beta_t: Any,
                          *, erase: bool = True) -> tuple[Any, Any]:
    """One token of the gated delta rule: ``S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) +
    beta_t v_t k_t^T`` and ``o_t = S_t q_t``.

    Parameters
    ----------
    state : numpy.ndarray or torch.Tensor, shape ``(..., d_v, d_k)``, or None
        ``S_{t-1}``; None is the empty memory (zeros).
    q_t, k_t : same library and dtype, shape ``(..., d_k)``
    v_t : same library and dtype, shape ``(..., d_v)``
    g_t : array of shape ``(...)`` or a real number, in ``(0, 1]``
        The forget gate (1 forgets nothing).
    beta_t : array of shape ``(...)`` or a real number, in ``[0, 1]``
        The writing strength (0 leaves the memory as it was, apart from the gate).
    erase : bool, default True
        False drops the erase term: ``S_t = g_t S_{t-1} + beta_t v_t k_t^T``.

    Returns
    -------
    o_t : array, shape ``(..., d_v)``
    state : array, shape ``(..., d_v, d_k)``
        ``S_t``, a new array; the input ``state`` is not modified. Same library, device
        and dtype as ``q_t``; differentiable on torch.

    Raises
    ------
    TypeError
        Mixed libraries or dtypes, a non-floating dtype, a gate that is neither a number
        nor an array, a non-bool ``erase``.
    ValueError
        Shapes that do not match, NaN or infinity in an input or the state, ``g_t``
        outside ``(0, 1]`` (a number that rounds to 0 in the dtype included), ``beta_t``
        outside ``[0, 1]``; a new state that overflows the dtype (named ``k, beta``).

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> k = np.array([1.0, 0.0])
    >>> o, s = ac.gated_delta_rule_step(None, k, k, np.array([2.0]), 1.0, 1.0)
    >>> o, s = ac.gated_delta_rule_step(s, k, k, np.array([5.0]), 1.0, 1.0)
    >>> o                        # the delta rule replaced 2 by 5 under the key k
    array([5.])
    """
    erase = check_flag("erase", erase)
    backend_of(q_t=q_t, k_t=k_t, v_t=v_t)
    for name, x, layout in (("q_t", q_t, "(..., d_k)"), ("k_t", k_t, "(..., d_k)"),
                            ("v_t", v_t, "(..., d_v)")):
        check_floating(name, x)
        check_min_rank(name, x, 1, layout)
    check_same_dtype(q_t=q_t, k_t=k_t, v_t=v_t)
    qs, ks, vs = shape_of(q_t), shape_of(k_t), shape_of(v_t)
    if qs != ks or vs[:-1] != qs[:-1] or not qs[-1]:
        raise ValueError(f"q_t, k_t, v_t: expected shapes (..., d_k), (..., d_k) and "
                         f"(..., d_v) with one leading shape and d_k >= 1, got {qs}, {ks} "
                         f"and {vs}")
    batch, d_k, d_v = qs[:-1], qs[-1], vs[-1]
    if not under_vmap(q_t, k_t, v_t):
        check_all_finite(q_t=q_t, k_t=k_t, v_t=v_t)
    g_t = _check_gate("g_t", g_t, batch, q_t, True)
    beta_t = _check_gate("beta_t", beta_t, batch, q_t, False)
    state = _check_state(state, batch, d_v, d_k, q_t)
    dtype = q_t.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        out, s = _step(*(_work(x) for x in (state, q_t, k_t, v_t, g_t, beta_t)), erase)
    out, s = _back(out, dtype), _back(s, dtype)
    if not under_vmap(out):
        _check_overflow(out, s, k_t[..., None, :], beta_t[..., None])
    return out, s


# --- a whole sequence -----------------------------------------------------------------------

def gated_delta_rule(q: Any, k: Any, v: Any, g: Any, beta: Any, *,
                     chunk_size: int | None = None, initial_state: Any = None,
                     return_state: bool = False, erase: bool = True) -> Any:
    """The gated delta rule over a sequence: ``o_t = S_t q_t`` for every token ``t``.

    ``S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T`` from ``S_0`` =
    ``initial_state`` (zeros by default), per batch entry and head.

    Parameters
    ----------
    q, k : numpy.ndarray or torch.Tensor, shape ``(..., n, d_k)``
        Queries and keys (models L2-normalise them per head; not done here). The leading
        axes ``...`` are batch and heads, e.g. ``(batch, heads, n, d_k)``.
    v : same library and dtype, shape ``(..., n, d_v)``
    g : array of shape ``(..., n)`` or a real number, in ``(0, 1]``
        The forget gate of each token (1: no decay).
    beta : array of shape ``(..., n)`` or a real number, in ``[0, 1]``
        The writing strength of each token.
    chunk_size : int, optional
        None: the recurrence, one token at a time (``n`` steps of ``O(d_v d_k)``).
        ``C >= 1``: the chunked form of the module docstring (the UT transform within
        chunks of ``C`` tokens, the recurrence from chunk to chunk); the last chunk may
        be shorter. Equal to the recurrence up to rounding.
    initial_state : array of shape ``(..., d_v, d_k)``, optional
        ``S_0``, e.g. the state an earlier call returned.
    return_state : bool, default False
        Also return the final state ``S_n``.
    erase : bool, default True
        False drops the erase term (gated linear attention, ``S_t = g_t S_{t-1} +
        beta_t v_t k_t^T``).

    Returns
    -------
    out : array, shape ``(..., n, d_v)``
        Same library, device and dtype as ``q``; differentiable on torch (with respect to
        ``q, k, v``, the gates and ``initial_state``).
    state : array, shape ``(..., d_v, d_k)``
        Only with ``return_state``: ``S_n``.

    Raises
    ------
    TypeError
        As attention (mixed libraries, non-floating or mismatched dtypes), a gate that is
        neither a number nor an array, a ``chunk_size`` that is not an integer, a flag
        that is not a bool.
    ValueError
        As attention (ranks, widths, batch shapes), ``q`` and ``k`` of different
        lengths, gates of the wrong shape, ``g`` outside ``(0, 1]`` (a number that
        rounds to 0 in q's dtype included), ``beta`` outside ``[0, 1]``, NaN or infinity
        in an input or ``initial_state``, a ``chunk_size`` below 1; a state that
        overflows the dtype (named ``k, beta``: with ``beta_t |k_t|^2 > 2`` the state
        grows at every such token; normalise ``k``).

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 10, 4))
    >>> k /= np.linalg.norm(k, axis=-1, keepdims=True)
    >>> g, beta = rng.uniform(0.5, 1.0, (2, 10)), rng.uniform(0.0, 1.0, (2, 10))
    >>> rec = ac.gated_delta_rule(q, k, v, g, beta)
    >>> chunked = ac.gated_delta_rule(q, k, v, g, beta, chunk_size=4)
    >>> bool(np.abs(rec - chunked).max() < 1e-12)
    True
    """
    shape = check_attention_inputs(q, k, v)
    if shape.n_q != shape.n_k:
        raise ValueError(f"q and k must have the same length n (one query per token): q "
                         f"has shape {shape_of(q)} (n={shape.n_q}), k has shape "
                         f"{shape_of(k)} (n={shape.n_k})")
    if chunk_size is not None:
        chunk_size = check_size("chunk_size", chunk_size)
    return_state = check_flag("return_state", return_state)
    erase = check_flag("erase", erase)
    if not under_vmap(q, k, v):
        check_all_finite(q=q, k=k, v=v)
    batch, n = shape.batch, shape.n_q
    g = _check_gate("g", g, batch + (n,), q, True)
    beta = _check_gate("beta", beta, batch + (n,), q, False)
    state = _check_state(initial_state, batch, shape.d_v, shape.d_k, q, "initial_state")
    dtype = q.dtype
    q, k, v, g, beta, state = (_work(x) for x in (q, k, v, g, beta, state))
    # (an overflow is reported below, as one ValueError, not as NumPy's warnings)
    with np.errstate(over="ignore", invalid="ignore"):
        if chunk_size is None:
            out, state = _recurrent(q, k, v, g, beta, state, erase)
        else:
            out, state = _chunked(q, k, v, g, beta, state, chunk_size, erase)
    out, state = _back(out, dtype), _back(state, dtype)
    if not under_vmap(out):
        _check_overflow(out, state, k, beta)
    return (out, state) if return_state else out


def _stack(xs: list, axis: int, like: Any) -> Any:
    if isinstance(like, np.ndarray):
        return np.stack(xs, axis=axis)
    return sys.modules["torch"].stack(xs, dim=axis)


def _empty_out(q: Any, v: Any) -> Any:
    shape = shape_of(q)[:-1] + (shape_of(v)[-1],)
    return np.zeros(shape, dtype=q.dtype) if isinstance(q, np.ndarray) else q.new_zeros(shape)


def _recurrent(q, k, v, g, beta, s, erase):
    """The definition: one token at a time."""
    outs = []
    for t in range(shape_of(q)[-2]):
        o, s = _step(s, q[..., t, :], k[..., t, :], v[..., t, :], g[..., t], beta[..., t],
                     erase)
        outs.append(o)
    return (_stack(outs, -2, q) if outs else _empty_out(q, v)), s


def _pad_tokens(x: Any, extra: int, value: float, axis: int) -> Any:
    """``x`` with ``extra`` entries equal to ``value`` appended along ``axis``."""
    if not extra:
        return x
    shape = list(shape_of(x))
    shape[axis] = extra
    if isinstance(x, np.ndarray):
        return np.concatenate([x, np.full(shape, value, dtype=x.dtype)], axis=axis)
    torch = sys.modules["torch"]
    return torch.cat([x, x.new_full(shape, value)], dim=axis)


def _forward_substitution(a: Any, r: Any) -> Any:
    """``X`` with ``(I + A) X = R`` for ``A`` strictly lower triangular ``(..., C, C)`` and
    ``R`` ``(..., C, m)``: ``x_t = r_t - sum_{i < t} A_ti x_i``, row after row (out of
    place, so that autograd can follow)."""
    rows = [r[..., 0, :]]
    for t in range(1, shape_of(a)[-1]):
        done = _stack(rows, -2, r)                              # (..., t, m)
        rows.append(r[..., t, :] - (a[..., t:t + 1, :t] @ done)[..., 0, :])
    return _stack(rows, -2, r)


def _chunked(q, k, v, g, beta, s, c, erase):
    """The chunked (WY / UT-transform) form of the module docstring."""
    xp = _xp(q)
    n, d_k, d_v = shape_of(q)[-2], shape_of(q)[-1], shape_of(v)[-1]
    if n == 0:
        return _empty_out(q, v), s
    # Pad to whole chunks with tokens that change nothing: beta = 0 writes nothing,
    # g = 1 forgets nothing, and their outputs are dropped.
    extra = -n % c
    q, k, v = (_pad_tokens(x, extra, 0.0, -2) for x in (q, k, v))
    g, beta = _pad_tokens(g, extra, 1.0, -1), _pad_tokens(beta, extra, 0.0, -1)
    batch = shape_of(q)[:-2]
    chunks = (n + extra) // c
    q, k = (x.reshape(batch + (chunks, c, d_k)) for x in (q, k))
    v = v.reshape(batch + (chunks, c, d_v))
    g, beta = g.reshape(batch + (chunks, c)), beta.reshape(batch + (chunks, c))

    # log gamma_t within each chunk, and the decay ratios gamma_t / gamma_i for i <= t
    # (exp of a number <= 0; the entries above the diagonal are never exponentiated)
    # The cumulative sum and its differences in float64: log gamma_t reaches thousands with
    # small gates, and float32's differences of two such sums cancel (relative errors of
    # 5e-4 in the outputs); the decay ratios are rounded to the working dtype once.
    wide = g.astype(np.float64) if isinstance(g, np.ndarray) else g.double()
    log_gamma = xp.cumsum(xp.log(wide), -1)
    diff = log_gamma[..., :, None] - log_gamma[..., None, :]            # (..., N, C, C)
    lower = np.tril(np.ones((c, c), dtype=bool))                        # i <= t
    strict = np.tril(np.ones((c, c), dtype=bool), -1)                   # i < t
    if not isinstance(q, np.ndarray):
        lower, strict = (xp.as_tensor(m, device=q.device) for m in (lower, strict))
    decay = _like(xp.exp(xp.where(lower, diff, xp.full_like(diff, -np.inf))), q)  # M
    gamma = _like(xp.exp(log_gamma), q)                                 # (..., N, C)
    kt = _transpose(k)

    # The UT transform, for every chunk at once: (I + A) [W U'] = [diag(beta gamma) K,
    # diag(beta) V], A_ti = beta_t (gamma_t / gamma_i) (k_t . k_i) for i < t.
    if erase:
        a = xp.where(strict, beta[..., :, None] * decay * (k @ kt), xp.zeros_like(decay))
        rhs = _cat_last((beta * gamma)[..., None] * k, beta[..., None] * v)
        wu = _forward_substitution(a, rhs)
        w, u_prime = wu[..., :d_k], wu[..., d_k:]
    else:                          # no erase term: u_t = beta_t v_t, whatever S_0
        w, u_prime = None, beta[..., None] * v
    scores = decay * (q @ kt)                                           # M * Q K^T
    to_end = _like(xp.exp(log_gamma[..., -1:] - log_gamma), q)          # gamma_C / gamma

    # From chunk to chunk: the only sequential part, one (d_v, d_k) state per step.
    outs = []
    for i in range(chunks):
        st = _transpose(s)
        u = u_prime[..., i, :, :] if w is None else \
            u_prime[..., i, :, :] - w[..., i, :, :] @ st                # U = U' - W S_0^T
        outs.append(gamma[..., i, :, None] * (q[..., i, :, :] @ st) +
                    scores[..., i, :, :] @ u)
        weighted = to_end[..., i, :, None] * u                          # diag(...) U
        s = gamma[..., i, -1, None, None] * s + _transpose(weighted) @ k[..., i, :, :]
    out = _stack(outs, -3, q).reshape(batch + (chunks * c, d_v))
    return out[..., :n, :], s


def _like(x: Any, like: Any) -> Any:
    """``x`` in ``like``'s dtype."""
    return x.astype(like.dtype, copy=False) if isinstance(x, np.ndarray) else x.to(like.dtype)


def _transpose(x: Any) -> Any:
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.transpose(-1, -2)


def _cat_last(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b], axis=-1)
    return sys.modules["torch"].cat([a, b], dim=-1)
