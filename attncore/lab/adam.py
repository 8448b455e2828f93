"""Adam, written out: the optimizer of the course's training loops.

For each parameter ``p`` with gradient ``g``, at step ``t = 1, 2, ...`` (Kingma & Ba, 2015)::

    m <- beta1 m + (1 - beta1) g                 first moment (a lerp towards g)
    v <- beta2 v + (1 - beta2) g * g             second moment
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

These are the operations of ``torch.optim.Adam`` (no weight decay, no AMSGrad), in its order,
so the two give the same numbers bit for bit (``tests/test_training.py`` checks it). The
update is written out here because constructing ``torch.optim.Adam`` imports PyTorch's
compiler (``torch._dynamo``): about two seconds of CPU in every process that trains, longer
than the chapters' small training runs themselves.
"""

from __future__ import annotations

from typing import Any, Iterable


class Adam:
    """Adam over a fixed list of tensors; ``lr`` may be changed between steps.

    Parameters
    ----------
    params : iterable of torch.Tensor
        The tensors to optimise (leaf tensors that require grad).
    lr : float, default 1e-3
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        import torch

        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        self._t = [0] * len(self.params)      # steps taken by each tensor
        self._m = [torch.zeros_like(p, memory_format=torch.preserve_format)
                   for p in self.params]
        self._v = [torch.zeros_like(p, memory_format=torch.preserve_format)
                   for p in self.params]

    def zero_grad(self) -> None:
        """Forget the gradients (as ``torch.optim``'s default, ``set_to_none=True``)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient (``t`` counts each tensor's
        own updates, as in ``torch.optim.Adam``)."""
        import torch

        beta1, beta2 = self.betas
        with torch.no_grad():
            for i, (p, m, v) in enumerate(zip(self.params, self._m, self._v)):
                if p.grad is None:
                    continue
                self._t[i] = t = self._t[i] + 1
                step_size = self.lr / (1 - beta1 ** t)
                bias_correction2_sqrt = (1 - beta2 ** t) ** 0.5
                g = p.grad
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
                p.addcdiv_(m, denom, value=-step_size)
