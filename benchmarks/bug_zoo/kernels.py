"""Buggy kernels of the bug zoo: each stands in for one real torch API (same name, same arguments) and computes
what a faulty device kernel would, so that the collector records it as that API's call and nothing else.

A kernel is registered in the collector's API table under the name of the API it replaces; the collector calls
it like any hooked API (the TorchFunctionMode hands it over through handle_torch_function) and the torch calls
inside it are not recorded, as the inner work of a real kernel is not. `calls` keeps the entry name of each
call (`Functional.linear.3.forward`), read from the collector's counters, so the zoo knows the injected op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch.overrides import handle_torch_function, has_torch_function

from msprobe.pytorch.hooks import api_table

BF16, FP16 = torch.bfloat16, torch.float16


class Kernels:
    """The buggy kernels of one run; `collector` is set when a dump starts (None: nothing is recorded)."""

    def __init__(self):
        self.collector = None
        self.calls: list = []

    def make(self, prefix: str, name: str, impl):
        """A function the collector records as `prefix.name` and that computes impl."""
        def kernel(*args, **kwargs):
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if has_torch_function(tensors):
                return handle_torch_function(kernel, tensors, *args, **kwargs)
            if self.collector is not None:
                key = f"{prefix}.{name}"
                self.calls.append(f"{key}.{self.collector.api_counts.get(key, 1) - 1}.forward")
            return impl(*args, **kwargs)
        api_table()[kernel] = (prefix, name)
        return kernel


def _low(x: torch.Tensor) -> torch.Tensor:
    """The tensor as the low-precision kernel sees it: bfloat16 under autocast (as the real op would cast)."""
    return x.to(BF16) if torch.is_autocast_cpu_enabled() or x.dtype == BF16 else x


def _accumulate_bf16(products):
    """Sum an iterable of bfloat16 tensors, rounding the running sum to bfloat16 after every addition."""
    total = None
    for part in products:
        total = part if total is None else (total + part).to(BF16)
    return total


def linear_bf16_accumulation(x, weight, bias=None):
    """F.linear whose dot products accumulate in bfloat16 instead of float32."""
    x, weight = x.to(BF16), weight.to(BF16)
    with torch.autocast("cpu", enabled=False):
        out = _accumulate_bf16((x[..., k:k + 1] * weight[:, k]).to(BF16) for k in range(x.shape[-1]))
        if bias is not None:
            out = (out + bias.to(BF16)).to(BF16)
    return out


def conv2d_bf16_accumulation(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv2d (groups 1) whose sums accumulate in bfloat16."""
    n, _, h, w = x.shape
    out_c, _, kh, kw = weight.shape
    with torch.autocast("cpu", enabled=False):
        cols = F.unfold(x.to(BF16).float(), (kh, kw), dilation=dilation, padding=padding, stride=stride).to(BF16)
        flat = weight.to(BF16).reshape(out_c, -1)
        out = _accumulate_bf16((cols[:, k:k + 1, :] * flat[:, k:k + 1]).to(BF16) for k in range(flat.shape[1]))
        if bias is not None:
            out = (out + bias.to(BF16)[:, None]).to(BF16)
        oh = (h + 2 * _pair(padding)[0] - _pair(dilation)[0] * (kh - 1) - 1) // _pair(stride)[0] + 1
        ow = (w + 2 * _pair(padding)[1] - _pair(dilation)[1] * (kw - 1) - 1) // _pair(stride)[1] + 1
    return out.reshape(n, out_c, oh, ow)


def _pair(value):
    return value if isinstance(value, (tuple, list)) else (value, value)


def softmax_low_precision(x, dim=None, _stacklevel=3, dtype=None):
    """Softmax in bfloat16 throughout: exp rounded to bfloat16 and the sum accumulated in bfloat16."""
    with torch.autocast("cpu", enabled=False):
        xb = x.to(BF16)
        e = torch.exp((xb - xb.amax(dim=dim, keepdim=True)).to(BF16)).to(BF16)
        moved = e.movedim(dim, 0)
        total = _accumulate_bf16(moved[i] for i in range(moved.shape[0])).unsqueeze(0).movedim(0, dim)
        return (e / total).to(BF16)


def softmax_wrong_dim(x, dim=None, _stacklevel=3, dtype=None):
    """Softmax over the wrong dimension (the one before the requested one)."""
    wrong = (dim - 1) if dim not in (0, -x.dim()) else dim + 1
    return torch.softmax(x, dim=wrong)


def layer_norm_wrong_eps(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    return F.layer_norm(x, normalized_shape, weight, bias, eps=0.1)


def layer_norm_low_precision(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm in bfloat16 with the one-pass variance E[x^2] - E[x]^2, both sums accumulated in bfloat16."""
    with torch.autocast("cpu", enabled=False):
        xb = x.to(BF16)
        n = xb.shape[-1]
        mean = (_accumulate_bf16(xb[..., i] for i in range(n)) / n).to(BF16)
        square = (_accumulate_bf16((xb[..., i] * xb[..., i]).to(BF16) for i in range(n)) / n).to(BF16)
        var = (square - mean * mean).to(BF16).clamp_min(0)
        out = ((xb - mean[..., None]) * torch.rsqrt(var[..., None] + eps).to(BF16)).to(BF16)
        if weight is not None:
            out = (out * weight.to(BF16) + bias.to(BF16)).to(BF16)
        return out


def batch_norm_wrong_eps(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                         eps=1e-5):
    return F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, 0.1)


def batch_norm_low_precision(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                             eps=1e-5):
    """Training-mode BatchNorm in bfloat16 with the one-pass variance, sums accumulated in bfloat16 per batch
    and row (the running statistics are updated as the real op would)."""
    with torch.no_grad():
        F.batch_norm(x.detach(), running_mean, running_var, None, None, training, momentum, eps)
    with torch.autocast("cpu", enabled=False):
        xb = x.to(BF16).transpose(0, 1).reshape(x.shape[1], -1)
        chunks = xb.reshape(xb.shape[0], -1, 32)
        n = xb.shape[1]
        mean = (_accumulate_bf16(chunks[:, :, i].sum(-1).to(BF16) for i in range(32)) / n).to(BF16)
        square = (_accumulate_bf16((chunks[:, :, i] * chunks[:, :, i]).sum(-1).to(BF16) for i in range(32)) / n)
        var = (square.to(BF16) - mean * mean).to(BF16).clamp_min(0)
        shape = (1, -1) + (1,) * (x.dim() - 2)
        out = ((x.to(BF16) - mean.reshape(shape)) * torch.rsqrt(var + eps).to(BF16).reshape(shape)).to(BF16)
        if weight is not None:
            out = (out * weight.to(BF16).reshape(shape) + bias.to(BF16).reshape(shape)).to(BF16)
        return out


def gelu_tanh(x, approximate="none"):
    """GELU with the tanh approximation where the exact (erf) form was asked for."""
    return F.gelu(x, approximate="tanh")


def adaptive_avg_pool2d_sum(x, output_size):
    """Global average pooling that forgets to divide by the number of elements (missing 1/(H*W) scale)."""
    return F.adaptive_avg_pool2d(x, output_size) * (x.shape[-1] * x.shape[-2])


def mean_wrong_dim(x, dim=None, keepdim=False, dtype=None):
    """Tensor.mean over the dimension before the requested one."""
    d = dim if isinstance(dim, int) else dim[0]
    return torch.mean(x, dim=d - 1 if d < 0 else d + 1, keepdim=keepdim)


def cross_entropy_fp16(logits, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                       reduction="mean", label_smoothing=0.0):
    """Cross entropy whose log-sum-exp runs in float16 without subtracting the maximum: exp overflows to inf."""
    with torch.autocast("cpu", enabled=False):
        half = logits.to(FP16)
        lse = torch.log(torch.exp(half).sum(-1))
        picked = half.gather(-1, target[:, None]).squeeze(-1)
        return (lse - picked).float().mean()


def linear_without_bias(x, weight, bias=None):
    """F.linear that drops its bias (a fused kernel ignoring the bias argument)."""
    return F.linear(x, weight)


def conv2d_transposed_weight(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv2d reading each 3x3 filter transposed (kernel rows and columns swapped: a layout bug)."""
    return F.conv2d(x, weight.transpose(-1, -2), bias, stride, padding, dilation, groups)
