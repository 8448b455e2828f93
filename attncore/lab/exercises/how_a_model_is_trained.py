"""Checker for the exercise of the page "How a model is trained": one Adam step, written by
the reader as ``my_adam_step(theta, grad, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999,
eps=1e-8) -> (theta, m, v)``.

The step is checked property by property, each on a small input that the message names,
against Adam's formulas computed here (Kingma & Ba, 2015), never by showing the numbers it
should return.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...testing.runner import Failure, call
from . import Verdict, exercise

SIGNATURE = ("my_adam_step(theta, grad, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, "
             "eps=1e-8) -> (theta, m, v)")

# name -> what the property asserts (in the order they are tried).
PROPERTIES = {
    "returns": "returns a tuple (theta, m, v) of three arrays shaped like theta",
    "inputs kept": "leaves theta, grad, m and v unchanged (returns new arrays)",
    "first moment": "m becomes beta1 * m + (1 - beta1) * grad",
    "second moment": "v becomes beta2 * v + (1 - beta2) * grad**2, element by element",
    "first step": "at t = 1 from m = v = 0, moves each parameter by about lr, against the "
                  "sign of its gradient, whatever the gradient's size",
    "bias correction": "at t = 2, 3, ... divides m by 1 - beta1**t and v by 1 - beta2**t",
    "eps": "adds eps to the square root of the corrected v (not inside the root)",
}


def _reference(theta, grad, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
    return theta - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def _inputs(kind: str):
    """(where, args, kwargs) of the small input on which a property is checked."""
    rng = np.random.default_rng(7)
    theta = np.array([0.5, -1.0, 2.0])
    if kind == "first":
        grad = np.array([3.0, -0.02, 400.0])
        return ("theta = [0.5, -1.0, 2.0], grad = [3.0, -0.02, 400.0], m = v = 0, t = 1",
                (theta, grad, np.zeros(3), np.zeros(3), 1), {})
    if kind == "later":
        grad = rng.standard_normal(3)
        m = 0.1 * rng.standard_normal(3)
        v = 0.1 * rng.random(3)
        return ("theta = [0.5, -1.0, 2.0], random grad, m and v (v > 0), t = 3, lr = 0.1",
                (theta, grad, m, v, 3), {"lr": 0.1})
    if kind == "moments":
        grad = np.array([1.0, -2.0, 0.5])
        m = np.array([0.2, 0.1, -0.3])
        v = np.array([0.5, 0.25, 1.0])
        return ("theta = [0.5, -1.0, 2.0], grad = [1.0, -2.0, 0.5], m = [0.2, 0.1, -0.3], "
                "v = [0.5, 0.25, 1.0], t = 4, beta1 = 0.8, beta2 = 0.9",
                (theta, grad, m, v, 4), {"beta1": 0.8, "beta2": 0.9})
    # "eps": gradients so small that eps matters
    grad = np.array([1e-9, -3e-9, 2e-10])
    return ("theta = [0.5, -1.0, 2.0], grad = [1e-9, -3e-9, 2e-10], m = v = 0, t = 1, "
            "eps = 1e-8", (theta, grad, np.zeros(3), np.zeros(3), 1), {})


def _run(fn: Callable[..., Any], kind: str):
    where, args, kwargs = _inputs(kind)
    copies = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
    with np.errstate(all="ignore"):        # a NaN is reported by the property it breaks
        got = call(fn, copies, kwargs, where=where, signature=SIGNATURE)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Failure(f"expected a tuple (theta, m, v), got {type(got).__name__}"
                      + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""),
                      where)
    arrays = []
    for name, x in zip(("theta", "m", "v"), got):
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise Failure(f"the returned {name} is not an array of numbers", where) from None
        if x.shape != args[0].shape:
            raise Failure(f"the returned {name} has shape {x.shape}, expected "
                          f"{args[0].shape} (the shape of theta)", where)
        arrays.append(x)
    changed = [n for n, a, c in zip(("theta", "grad", "m", "v"), args, copies)
               if not np.array_equal(a, c)]
    return where, args, kwargs, arrays, changed


def _close(a, b, rtol=1e-6, atol=1e-12) -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.isfinite(a)) and np.allclose(a, b, rtol=rtol, atol=atol))


def adam_step_problems(fn: Callable[..., Any]) -> list[tuple[str, str]]:
    """(property, sentence) for each property of :data:`PROPERTIES` that ``fn`` breaks; the
    sentence names the input, never the values expected."""
    found: list[tuple[str, str]] = []
    runs = {}
    for kind in ("moments", "first", "later", "eps"):
        try:
            runs[kind] = _run(fn, kind)
        except Failure as err:
            return [("returns", f"{err.detail} (on {err.input})")]
    if any(r[4] for r in runs.values()):
        kind = next(k for k, r in runs.items() if r[4])
        found.append(("inputs kept", f"the function changed {', '.join(runs[kind][4])} in "
                                     f"place (on {runs[kind][0]})"))
    where, args, kwargs, (theta, m, v), _ = runs["moments"]
    _, m_ref, v_ref = _reference(*args, **kwargs)
    if not _close(m, m_ref):
        found.append(("first moment", f"the returned m is not beta1 * m + (1 - beta1) * "
                                      f"grad (on {where})"))
    if not _close(v, v_ref):
        found.append(("second moment", f"the returned v is not beta2 * v + (1 - beta2) * "
                                       f"grad**2 (on {where})"))
    where, args, kwargs, (theta, m, v), _ = runs["first"]
    theta_ref, _, _ = _reference(*args, **kwargs)
    if not _close(theta, theta_ref):
        found.append(("first step", f"the first step does not move each parameter by about "
                                    f"lr against its gradient's sign (on {where})"))
    where, args, kwargs, (theta, m, v), _ = runs["later"]
    theta_ref, _, _ = _reference(*args, **kwargs)
    if not _close(theta, theta_ref):
        found.append(("bias correction", f"the new theta is not Adam's bias-corrected step "
                                         f"(on {where})"))
    where, args, kwargs, (theta, m, v), _ = runs["eps"]
    theta_ref, _, _ = _reference(*args, **kwargs)
    if not _close(theta, theta_ref, rtol=1e-4, atol=1e-14):
        found.append(("eps", f"with gradients as small as eps the step is not Adam's: is eps "
                             f"added to the square root of the corrected v? (on {where})"))
    return found


@exercise("ex-how-a-model-is-trained-adam-step")
def adam_step(fn: Any) -> Verdict:
    """A reader-written ``my_adam_step``, checked property by property."""
    if not callable(fn):
        return Verdict(False, f"expected a function {SIGNATURE}, got "
                              f"{type(fn).__name__}")
    problems = adam_step_problems(fn)
    if not problems:
        return Verdict(True, f"Your step has all {len(PROPERTIES)} properties of Adam's "
                             "step that the check tries.")
    names = ", ".join(name for name, _ in problems)
    return Verdict(False, f"{len(problems)} of the {len(PROPERTIES)} properties failed "
                          f"({names}).", tuple(sentence for _, sentence in problems))
