"""Linear attention: a kernel in place of the softmax, and the product re-associated.

Replace the weight ``exp(q_i . k_j)`` by ``phi(q_i) . phi(k_j)`` for a feature map ``phi``
from ``R^d`` to ``R^r`` with non-negative entries (Katharopoulos et al., 2020)::

    out_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j)
          = phi(q_i)^T S / phi(q_i)^T z,    S = sum_j phi(k_j) v_j^T,   z = sum_j phi(k_j).

The ``(n_q, n_k)`` weight matrix is never formed: ``S`` (shape ``(r, d_v)``) and ``z``
cost ``O(n_k r d_v)``, and each query ``O(r d_v)``, so the whole is linear in the length.
Under a causal mask ``S`` and ``z`` become prefix sums, which is a recurrent network whose
state has a constant size (:func:`linear_attention_step`).

Feature maps: ``"elu"`` (``elu(x) + 1``, the paper's), ``"relu"``, any callable, and
:class:`RandomFeatures`, Performer's positive random features (Choromanski et al., 2021),
whose dot products are unbiased estimates of ``exp(scale * q . k)``: softmax attention,
approximately, in linear time.

NumPy arrays and torch tensors (on their own device) alike; float16 and bfloat16 are
computed in float32. Bad input gets the errors of :mod:`attncore`'s attention.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, NamedTuple

import numpy as np

from ._backend import (
    backend_of,
    check_all_finite,
    check_attention_inputs,
    check_floating,
    check_min_rank,
    check_real,
    check_same_dtype,
    check_size,
    dtype_name,
    is_torch_tensor,
    shape_of,
)

__all__ = ["FEATURE_MAPS", "LinearAttentionState", "RandomFeatures", "linear_attention",
           "linear_attention_step"]


def _xp(x: Any) -> Any:
    return np if isinstance(x, np.ndarray) else sys.modules["torch"]


def _elu_plus_one(x: Any) -> Any:
    """``elu(x) + 1``: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise (always > 0)."""
    xp = _xp(x)
    return xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, xp.zeros_like(x))))


def _relu(x: Any) -> Any:
    xp = _xp(x)
    return xp.maximum(x, xp.zeros_like(x))


FEATURE_MAPS: dict[str, Callable[[Any], Any]] = {"elu": _elu_plus_one, "relu": _relu}


class RandomFeatures:
    """Performer's positive random features for the softmax kernel.

    ``phi(x) = exp(W (sqrt(s) x) - s |x|^2 / 2) / sqrt(m)`` with the ``m`` rows of ``W``
    drawn from ``N(0, I_d)`` once, from ``seed``. For every ``q`` and ``k``,
    ``E[phi(q) . phi(k)] = exp(s q . k)``: an unbiased estimate of softmax attention's
    weight before normalisation, whose variance falls as ``1 / m``.

    Called on its own, it gives these features as they are: for inputs of large norm
    every entry underflows (``s |x|^2 / 2`` beyond about 745 in float64, 87 in float32).
    :func:`linear_attention` and :func:`linear_attention_step` compute with it stabilised
    instead, as Performer does (Choromanski et al., 2021): see :func:`linear_attention`.

    Parameters
    ----------
    d : int
        Dimension of the inputs (``d_k``).
    num_features : int
        ``m``, the number of random features (the width ``r`` of ``phi``).
    seed : int
        Seed of ``numpy.random.default_rng`` for ``W``.
    scale : real number, optional
        ``s``; defaults to ``1 / sqrt(d)``, attention's scale.

    Attributes
    ----------
    weights : numpy.ndarray, shape ``(num_features, d)``, float64
        ``W``. Inputs on torch get a copy on their device, in their dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from attncore import RandomFeatures
    >>> phi = RandomFeatures(2, 100_000, seed=1, scale=1.0)
    >>> q, k = np.array([[0.5, 0.0]]), np.array([[0.4, 0.3]])
    >>> round((phi(q) @ phi(k).T).item(), 2), round(np.exp(q @ k.T).item(), 2)
    (1.22, 1.22)
    """

    def __init__(self, d: int, num_features: int, *, seed: int, scale: Any = None) -> None:
        self.d = check_size("d", d)
        self.num_features = check_size("num_features", num_features)
        # (numpy.random.default_rng takes any integer >= 0)
        self.seed = check_size("seed", seed, minimum=0)
        self.scale = 1.0 / math.sqrt(self.d) if scale is None else \
            check_real("scale", scale, above=0)
        self.weights = np.random.default_rng(self.seed).standard_normal((self.num_features,
                                                                          self.d))

    def __repr__(self) -> str:
        return (f"RandomFeatures(d={self.d}, num_features={self.num_features}, "
                f"seed={self.seed}, scale={self.scale!r})")

    def __call__(self, x: Any) -> Any:
        """``phi(x)`` for ``x`` of shape ``(..., n, d)``: shape ``(..., n, num_features)``."""
        return _xp(x).exp(self._exponents(x)) / math.sqrt(self.num_features)

    def _exponents(self, x: Any) -> Any:
        """``W (sqrt(s) x) - s |x|^2 / 2``, the logarithms of ``sqrt(m) phi(x)``, checked."""
        if not (isinstance(x, np.ndarray) or is_torch_tensor(x)):
            raise TypeError(f"x: expected a numpy.ndarray or a torch.Tensor, got "
                            f"{type(x).__name__}")
        check_floating("x", x)
        if x.ndim < 1 or shape_of(x)[-1] != self.d:
            raise ValueError(f"x: expected shape (..., {self.d}) (these features were drawn "
                             f"for d = {self.d}), got {shape_of(x)}")
        xp = _xp(x)
        if isinstance(x, np.ndarray):
            w = self.weights.astype(x.dtype)
        else:
            w = xp.as_tensor(self.weights, dtype=x.dtype, device=x.device)
        root = math.sqrt(self.scale)
        projected = (x * root) @ w.T
        half_norm = (x * x).sum(-1)[..., None] * (self.scale / 2)
        return projected - half_norm


class LinearAttentionState(NamedTuple):
    """The recurrent state of causal linear attention after some tokens.

    Attributes
    ----------
    kv : array, shape ``(..., r, d_v)``
        ``S = sum_j phi(k_j) v_j^T`` over the tokens so far.
    z : array, shape ``(..., r)``
        ``z = sum_j phi(k_j)``.
    shift : array, shape ``(..., 1)``, or None
        With :class:`RandomFeatures`: the largest exponent of the keys so far, which
        ``kv`` and ``z`` are scaled by ``exp(-shift)`` for (see :func:`linear_attention`);
        None with any other feature map.
    """

    kv: Any
    z: Any
    shift: Any = None


# --- checks ---------------------------------------------------------------------------------

def _feature_map(feature_map: Any) -> Callable[[Any], Any]:
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map: expected one of {tuple(FEATURE_MAPS)} or a "
                             f"callable, got {feature_map!r}")
        return FEATURE_MAPS[feature_map]
    if not callable(feature_map):
        raise TypeError(f"feature_map: expected one of {tuple(FEATURE_MAPS)} or a callable, "
                        f"got {type(feature_map).__name__}")
    return feature_map


def _check_eps(eps: Any) -> float:
    return check_real("eps", eps, minimum=0)


def _features(phi: Callable[[Any], Any], x: Any, name: str) -> Any:
    """``phi(x)``, checked: same library, device and dtype, shape ``(..., n, r)``, r >= 1,
    finite and non-negative (a weight ``phi(q) . phi(k)`` must be one)."""
    f = phi(x)
    label = f"feature_map({name})"
    if type(f) is not type(x) and not (is_torch_tensor(f) and is_torch_tensor(x)):
        raise TypeError(f"{label}: expected a {type(x).__name__} like {name}, got "
                        f"{type(f).__name__}")
    if f.dtype != x.dtype:
        raise TypeError(f"{label}: expected dtype {dtype_name(x)} like {name}, got "
                        f"{dtype_name(f)}")
    if is_torch_tensor(f) and f.device != x.device:
        raise ValueError(f"{label}: expected a tensor on {x.device} like {name}, got one on "
                         f"{f.device}")
    if f.ndim != x.ndim or shape_of(f)[:-1] != shape_of(x)[:-1] or shape_of(f)[-1] < 1:
        raise ValueError(f"{label}: expected shape {shape_of(x)[:-1] + ('r',)} with r >= 1 "
                         f"(one feature vector per row of {name}), got {shape_of(f)}")
    check_all_finite(**{label: f})
    if bool((f < 0).any()):
        raise ValueError(f"{label}: expected features >= 0 (the weights phi(q) . phi(k) "
                         f"must not be negative), got a negative entry")
    return f


def _work(x: Any) -> Any:
    """float16 and bfloat16 are computed in float32."""
    if x.dtype.itemsize != 2:
        return x
    if isinstance(x, np.ndarray):
        return x.astype(np.float32)
    return x.float()


def _divide(num: Any, den: Any) -> Any:
    """``num / den`` by rows, zeros where ``den = 0`` (no key, or all weights 0)."""
    xp = _xp(num)
    safe = xp.where(den > 0, den, xp.ones_like(den))
    return xp.where(den > 0, num / safe, xp.zeros_like(num))


def _row_max(x: Any, axis: int) -> Any:
    if isinstance(x, np.ndarray):
        return x.max(axis=axis, keepdims=True)
    return x.amax(dim=axis, keepdim=True)


def _random_exponents(phi: "RandomFeatures", x: Any, name: str) -> Any:
    a = phi._exponents(x)
    check_all_finite(**{f"feature_map({name})": a})
    return a


def _query_features(phi: "RandomFeatures", q: Any) -> Any:
    """Performer's query features: each row divided by ``exp`` of its largest exponent,
    so that its largest entry is ``1 / sqrt(m)``."""
    a = _random_exponents(phi, q, "q")
    return _xp(a).exp(a - _row_max(a, -1)) / math.sqrt(phi.num_features)


def _refuse_collapse(raw: Any, eps: Any) -> None:
    """A row whose stabilised weights sum to no more than its ``eps`` is eps's, not the
    keys' (near zeros, or zeros where the sum underflowed): refused, with the reason."""
    bad = ~(raw > eps)
    if not bool(bad.any()):
        return
    index = tuple(int(i) for i in np.argwhere(np.asarray(bad.tolist()))[0])
    got = float(raw[index])
    limit = float(eps if isinstance(eps, float) else eps[index])
    raise ValueError(
        f"feature_map: the random features' weights of query row {index[:-1]} sum to "
        f"{got:.3g} (stabilised: its query's largest feature and the largest of the keys "
        f"it sees scaled to 1/sqrt(m)), not above eps={limit:.3g}: the row would be "
        f"eps's, near zero, not an average of values. The largest features of q and of "
        f"k point different ways, where the estimator fails (its variance grows as "
        f"exp(s |q + k|^2)); pass eps=0, use more features or smaller q and k")


# --- linear attention -------------------------------------------------------------------------

def linear_attention(q: Any, k: Any, v: Any, *, feature_map: Any = "elu",
                     causal: bool = False, eps: float = 1e-6) -> Any:
    """Kernelised attention in time linear in the sequence length.

    ``out_i = phi(q_i)^T S / (phi(q_i)^T z + eps)`` with ``S = sum_j phi(k_j) v_j^T`` and
    ``z = sum_j phi(k_j)`` over the keys ``j`` query ``i`` may see: the same numbers as
    ``A v / (A 1 + eps)`` for ``A = phi(Q) phi(K)^T``, computed without ``A``.

    Parameters
    ----------
    q : numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_k)``
    k : same library and dtype, shape ``(..., n_k, d_k)``
    v : same library and dtype, shape ``(..., n_k, d_v)``
    feature_map : {"elu", "relu"} or callable, default "elu"
        ``phi``, applied to ``q`` and to ``k``: a callable maps an array of shape
        ``(..., n, d_k)`` to one of shape ``(..., n, r)`` of the same library and dtype,
        with finite entries ``>= 0`` (e.g. a :class:`RandomFeatures`).
    causal : bool, default False
        Query ``i`` sees keys ``j <= i`` (top-left aligned, as attention's ``causal``).
        Computed with prefix sums, ``O(n r d_v)`` time and memory.
    eps : float, default 1e-6
        Added to every denominator. A row whose denominator is 0 (no key, or ``eps = 0``
        with zero weights) is zeros, as attention returns for a row with no key.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape ``(..., n_q, d_v)``
        Same library, device and dtype as ``q``; differentiable on torch.

    Notes
    -----
    Random features, stabilised. A :class:`RandomFeatures` ``phi`` is an exponential,
    ``sqrt(m) phi_r(x) = exp(a_r(x))``, whose entries underflow for inputs of large norm
    (and whose products fall below ``eps`` well before that), which left rows of zeros.
    As Performer (Choromanski et al., 2021), the largest exponent is subtracted before
    the exponential, and which maximum decides whether the estimate is kept:

    * a query row is divided by ``exp(max_r a_r(q_i))``, its own maximum: row ``i``'s
      numerator and denominator are both multiplied by the same constant, so
      ``out_i`` is the same estimator (with ``eps = 0``, the same number);
    * the keys are divided by ``exp(max_{j, r} a_r(k_j))``, one maximum over all the keys
      a query sees (per batch entry; under ``causal``, over keys ``0..i`` for query
      ``i``, the running maximum of :func:`linear_attention_step`). A maximum per key
      would scale each key's weight by its own factor: a different, biased weighting,
      which no number of features makes softmax attention. One constant for all of
      them cancels like the query's.

    So the output is, to rounding, ``A v / (A 1)``, with ``A = phi(Q) phi(K)^T`` as
    defined, and ``eps`` is added to the stabilised denominator (whose largest possible
    term is ``1 / m``), as in Performer. A row whose stabilised weights sum to no more
    than ``eps`` (``eps = 0``: to 0, an underflow) would be ``eps``'s, near zero; it is
    refused with a ``ValueError`` rather than returned. That happens when the largest
    features of a query and of its keys point different ways, as for large ``|q|`` and
    ``|k|`` pointing apart, where the estimator fails anyway (its variance grows as
    ``exp(s |q + k|^2)``); ``eps=0`` then gives the estimate. Autograd differentiates
    through the maxima too: the gradient is that of the function computed.

    Raises
    ------
    TypeError
        What attention refuses (mixed libraries, non-floating or mismatched dtypes, a
        non-bool ``causal``), a ``feature_map`` that is neither a known name nor callable,
        or that returns another library or dtype.
    ValueError
        What attention refuses (ranks, mismatched ``d_k``, ``n_k`` or batch shapes, NaN or
        infinity in an input), an unknown feature map name, features of the wrong shape,
        non-finite or negative, a negative or non-finite ``eps``; with
        :class:`RandomFeatures`, a row that ``eps`` would decide (see Notes).

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> q = np.zeros((1, 2)); k = np.zeros((2, 2)); v = np.array([[1.0], [3.0]])
    >>> ac.linear_attention(q, k, v, eps=0.0)       # equal weights: the mean of v
    array([[2.]])
    """
    shape = check_attention_inputs(q, k, v, causal=causal)
    phi = _feature_map(feature_map)
    eps = _check_eps(eps)
    check_all_finite(q=q, k=k, v=v)
    dtype = q.dtype
    q, k, v = _work(q), _work(k), _work(v)
    xp = _xp(q)
    last = np.minimum(np.arange(shape.n_q), shape.n_k - 1)   # causal: query i's last key
    stabilised = isinstance(phi, RandomFeatures) and shape.n_k > 0
    if stabilised:
        fq, fk, eps = _stabilised_features(phi, q, k, eps, last if shape.causal else None)
    else:
        fq, fk = _features(phi, q, "q"), _features(phi, k, "k")
    if shape_of(fq)[-1] != shape_of(fk)[-1]:
        raise ValueError(f"feature_map: expected one width r for q and k, got "
                         f"{shape_of(fq)[-1]} and {shape_of(fk)[-1]}")
    if not shape.causal:
        kv = xp.einsum("...jr,...jd->...rd", fk, v)          # S: (..., r, d_v)
        z = fk.sum(-2)                                       # (..., r)
        num = fq @ kv
        raw = fq @ z[..., None]
    elif shape.n_k == 0:                                     # no key: rows of zeros
        num = _zeros_out(q, v)
        raw = num[..., :1]
    else:
        # prefix sums over the keys; query i reads those after key min(i, n_k - 1)
        outer = fk[..., :, :, None] * v[..., :, None, :]     # (..., n_k, r, d_v)
        kv = _cumsum(outer, -3)
        z = _cumsum(fk, -2)
        kv, z = _take(kv, last, -3), _take(z, last, -2)
        num = xp.einsum("...ir,...ird->...id", fq, kv)
        raw = (fq * z).sum(-1)[..., None]
    if stabilised:
        _refuse_collapse(raw, eps)
    out = _divide(num, raw + eps)
    return out.astype(dtype) if isinstance(out, np.ndarray) else out.to(dtype)


def _stabilised_features(phi: "RandomFeatures", q: Any, k: Any, eps: float,
                         last: np.ndarray | None) -> tuple[Any, Any, Any]:
    """Performer's features of ``q`` and ``k`` (``n_k >= 1``), and the ``eps`` of each
    query row (see :func:`linear_attention`'s Notes).

    The keys are divided by ``exp(M)``, ``M`` the largest exponent of all keys (per batch
    entry). Under ``causal`` (``last``: the last key of each query) query ``i`` sees keys
    ``0..last_i`` only, whose largest exponent ``M_i <= M`` is the one the recurrent form
    has used; dividing by ``exp(M)`` instead scales the row by ``exp(M_i - M)``, and so its
    ``eps`` is scaled the same way, which keeps the two forms one function.
    """
    xp = _xp(q)
    fq = _query_features(phi, q)
    b = _random_exponents(phi, k, "k")
    key_max = _row_max(b, -1)                               # (..., n_k, 1)
    top = _row_max(key_max, -2)                             # (..., 1, 1)
    fk = xp.exp(b - top) / math.sqrt(phi.num_features)
    if last is None:
        return fq, fk, eps
    if isinstance(key_max, np.ndarray):
        running = np.maximum.accumulate(key_max, axis=-2)
    else:
        running = key_max.cummax(dim=-2).values
    return fq, fk, eps * xp.exp(_take(running, last, -2) - top)     # (..., n_q, 1)


def _zeros_out(q: Any, v: Any) -> Any:
    shape = shape_of(q)[:-1] + (shape_of(v)[-1],)
    if isinstance(q, np.ndarray):
        return np.zeros(shape, dtype=q.dtype)
    return q.new_zeros(shape) + 0 * v.sum()        # keeps v in the autograd graph


def _cumsum(x: Any, axis: int) -> Any:
    if isinstance(x, np.ndarray):
        return np.cumsum(x, axis=axis)
    return x.cumsum(dim=axis)


def _take(x: Any, index: np.ndarray, axis: int) -> Any:
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=axis)
    torch = sys.modules["torch"]
    return x.index_select(axis % x.ndim, torch.as_tensor(index, device=x.device))


def linear_attention_step(state: Any, q: Any, k: Any, v: Any, *, feature_map: Any = "elu",
                          eps: float = 1e-6) -> tuple[Any, LinearAttentionState]:
    """One token of causal linear attention, as a recurrent network: ``O(r d_v)`` work.

    ``S <- S + phi(k) v^T``, ``z <- z + phi(k)``, then
    ``out = phi(q)^T S / (phi(q)^T z + eps)``. Running it over tokens ``0, 1, ...`` gives
    the rows of ``linear_attention(..., causal=True)``.

    Parameters
    ----------
    state : LinearAttentionState or None
        The state after the previous tokens; ``None`` before the first.
    q, k : numpy.ndarray or torch.Tensor, shape ``(..., d_k)``
        This token's query and key.
    v : same library and dtype, shape ``(..., d_v)``
        This token's value.
    feature_map, eps
        As for :func:`linear_attention`.

    Returns
    -------
    out : array, shape ``(..., d_v)``
        This token's output, in ``q``'s dtype.
    state : LinearAttentionState
        ``kv`` of shape ``(..., r, d_v)`` and ``z`` of shape ``(..., r)``, in the working
        dtype (float32 for float16 and bfloat16 inputs).

    Raises
    ------
    TypeError, ValueError
        As for :func:`linear_attention`, and for a ``state`` that is not a
        :class:`LinearAttentionState` of the shapes above.

    Examples
    --------
    >>> import numpy as np, attncore as ac
    >>> x = np.zeros(2)
    >>> out, state = ac.linear_attention_step(None, x, x, np.array([1.0]))
    >>> out, state = ac.linear_attention_step(state, x, x, np.array([3.0]))
    >>> out.round(6), state.z
    (array([2.]), array([2., 2.]))
    """
    backend_of(q=q, k=k, v=v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_floating(name, x)
        check_min_rank(name, x, 1, "(..., d)")
    check_same_dtype(q=q, k=k, v=v)
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if qs != ks:
        raise ValueError(f"q and k: expected the same shape (..., d_k), got q {qs} and k {ks}")
    if qs[:-1] != vs[:-1]:
        raise ValueError(f"q, k and v: expected the same batch shape (...), got q {qs}, "
                         f"v {vs}")
    if qs[-1] == 0:
        raise ValueError(f"q and k: expected d_k >= 1, got q of shape {qs}")
    phi = _feature_map(feature_map)
    eps = _check_eps(eps)
    check_all_finite(q=q, k=k, v=v)
    dtype = q.dtype
    q, k, v = _work(q), _work(k), _work(v)
    xp = _xp(q)
    stabilised = isinstance(phi, RandomFeatures)
    if stabilised:
        # the query's own maximum; the keys' running maximum, the state rescaled when
        # a key raises it (as the online softmax rescales its sums)
        fq = _query_features(phi, q[..., None, :])[..., 0, :]
        b = _random_exponents(phi, k[..., None, :], "k")[..., 0, :]
        shift = _row_max(b, -1)                                    # (..., 1)
        if state is not None:
            _check_state(state, LinearAttentionState(None, None, shift), q)
            shift = xp.maximum(state.shift, shift)
        fk = xp.exp(b - shift) / math.sqrt(phi.num_features)
    else:
        fq = _features(phi, q[..., None, :], "q")[..., 0, :]
        fk = _features(phi, k[..., None, :], "k")[..., 0, :]
        shift = None
    r = shape_of(fq)[-1]
    if shape_of(fk)[-1] != r:
        raise ValueError(f"feature_map: expected one width r for q and k, got {r} and "
                         f"{shape_of(fk)[-1]}")
    update = LinearAttentionState(fk[..., :, None] * v[..., None, :], fk, shift)
    if state is None:
        new = update
    else:
        _check_state(state, update, q)
        kv, z = state.kv, state.z
        if stabilised:
            rescale = xp.exp(state.shift - shift)                  # <= 1
            kv, z = kv * rescale[..., None], z * rescale
        new = LinearAttentionState(kv + update.kv, z + update.z, shift)
    num = (fq[..., None, :] @ new.kv)[..., 0, :]
    raw = (fq * new.z).sum(-1)[..., None]
    if stabilised:
        _refuse_collapse(raw, eps)
    out = _divide(num, raw + eps)
    return (out.astype(dtype) if isinstance(out, np.ndarray) else out.to(dtype)), new


def _check_state(state: Any, update: LinearAttentionState, like: Any) -> None:
    """``state`` against this step's ``update`` (whose ``kv`` and ``z`` are None when only
    the shift is checked, before the features are made)."""
    if not isinstance(state, LinearAttentionState):
        raise TypeError(f"state: expected a LinearAttentionState(kv, z) or None, got "
                        f"{type(state).__name__}")
    if state.shift is not None and update.shift is None:
        raise ValueError("state.shift: expected None (the state of this feature_map), got "
                         "the keys' shift of a state made with RandomFeatures")
    if state.shift is None and update.shift is not None:
        raise ValueError("state.shift: expected the keys' shift of a state made with "
                         "RandomFeatures, got None (the state of another feature_map)")
    parts = [("state.kv", state.kv, update.kv), ("state.z", state.z, update.z),
             ("state.shift", state.shift, update.shift)]
    parts = [(n, x, w) for n, x, w in parts if w is not None]
    backend_of(q=like, **{n: x for n, x, _ in parts})
    for part, x, want in parts:
        if shape_of(x) != shape_of(want):
            raise ValueError(f"{part}: expected shape {shape_of(want)} (from this step's "
                             f"features and v), got {shape_of(x)}")
        if x.dtype != want.dtype:
            raise TypeError(f"{part}: expected dtype {dtype_name(want)}, got "
                            f"{dtype_name(x)}")
