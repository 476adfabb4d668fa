"""CPU reference implementations used as the benchmark of MindSpore APIs that have no CPU kernel (spec §3.1:
`Functional.flash_attention_score` is compared with "a built-in CPU reference implementation"). They are written
with MindSpore's own differentiable ops so that the benchmark of the backward comes from MindSpore's grad too;
acc_check calls them with float64 (float32 for float16/bfloat16) inputs on the CPU."""

from __future__ import annotations

LAYOUTS = ("BSH", "SBH", "BNSD", "BSND")
MASKED = -1e30   # a masked score; exp() of it underflows to exactly 0


def flash_attention_score(query, key, value, head_num, real_shift=None, drop_mask=None, padding_mask=None,
                          attn_mask=None, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, keep_prob=1.0,
                          scalar_value=1.0, pre_tokens=2147483647, next_tokens=2147483647, inner_precise=0,
                          input_layout="BSH", sparse_mode=0):
    """attention_out = Softmax(Mask(scalar_value · q·kᵀ + real_shift, attn_mask)) · v, as documented for
    mindspore.ops.flash_attention_score; key/value heads are repeated when fewer than the query's (GQA).
    attn_mask: True/1 discards. sparse_mode 0 (attn_mask plus the pre_tokens/next_tokens band), 1 (attn_mask
    only), 2 (left-up causal) and 3 (right-down causal); the compressed band/prefix modes, dropout, variable
    lengths (TND) and padding_mask are not reproduced (NotImplementedError, reported as a SKIP)."""
    from mindspore import Tensor, mint

    if keep_prob != 1.0 or drop_mask is not None:
        raise NotImplementedError("flash_attention_score with dropout (keep_prob < 1) has no CPU reference.")
    if input_layout not in LAYOUTS:
        raise NotImplementedError(f"flash_attention_score input_layout {input_layout} has no CPU reference "
                                  f"(supported: {', '.join(LAYOUTS)}).")
    if sparse_mode not in (0, 1, 2, 3):
        raise NotImplementedError(f"flash_attention_score sparse_mode {sparse_mode} has no CPU reference "
                                  "(supported: 0, 1, 2, 3).")
    if any(v is not None for v in (padding_mask, prefix, actual_seq_qlen, actual_seq_kvlen)):
        raise NotImplementedError("flash_attention_score with padding_mask, prefix or actual sequence lengths has "
                                  "no CPU reference.")
    q, k, v = (_to_bnsd(t, head_num, input_layout, query) for t in (query, key, value))
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:
        if heads % kv_heads:
            raise ValueError(f"flash_attention_score: {heads} query heads are not a multiple of {kv_heads} "
                             "key/value heads.")
        k, v = (_repeat_heads(t, heads // kv_heads) for t in (k, v))
    scores = mint.matmul(q, mint.transpose(k, -1, -2))
    # a Tensor scale: MindSpore would round a Python float to float32 even for float64 scores
    scores = scores * Tensor(scalar_value, scores.dtype)
    if real_shift is not None:
        scores = scores + real_shift.astype(scores.dtype)
    mask = _mask(attn_mask, sparse_mode, pre_tokens, next_tokens, scores.shape[-2], scores.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, MASKED)
    out = mint.matmul(mint.nn.functional.softmax(scores, dim=-1), v)
    return _from_bnsd(out, input_layout)


def _repeat_heads(tensor, times):
    """Each key/value head `times` times in a row (repeat_interleave on dim 1; its CPU kernel is missing)."""
    from mindspore import mint

    b, n, s, d = tensor.shape
    return mint.broadcast_to(tensor.unsqueeze(2), (b, n, times, s, d)).reshape(b, n * times, s, d)


def _to_bnsd(tensor, head_num, layout, query):
    from mindspore import mint

    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return mint.transpose(tensor, 1, 2)
    head_dim = query.shape[-1] // head_num
    if layout == "BSH":
        b, s, h = tensor.shape
        return mint.transpose(tensor.reshape(b, s, h // head_dim, head_dim), 1, 2)
    s, b, h = tensor.shape                                  # SBH
    return tensor.reshape(s, b, h // head_dim, head_dim).permute(1, 2, 0, 3)


def _from_bnsd(out, layout):
    from mindspore import mint

    if layout == "BNSD":
        return out
    if layout == "BSND":
        return mint.transpose(out, 1, 2)
    b, n, s, d = out.shape
    if layout == "BSH":
        return mint.transpose(out, 1, 2).reshape(b, s, n * d)
    return out.permute(2, 0, 1, 3).reshape(s, b, n * d)      # SBH


def _mask(attn_mask, sparse_mode, pre_tokens, next_tokens, rows, cols):
    """The boolean discard mask (broadcastable to the scores) of the sparse mode, or None."""
    import numpy as np
    from mindspore import Tensor

    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    band = None
    if sparse_mode == 0 and (pre_tokens < rows + cols or next_tokens < rows + cols):
        band = (j > i + next_tokens) | (j < i - pre_tokens)
    elif sparse_mode == 2:
        band = j > i
    elif sparse_mode == 3:
        band = j > i + (cols - rows)
    user = None
    if attn_mask is not None and sparse_mode in (0, 1):
        user = attn_mask.asnumpy().astype(bool)
        if user.ndim == 2:
            user = user[None, None]
    if band is None and user is None:
        return None
    combined = band[None, None] if user is None else (user if band is None else user | band[None, None])
    return Tensor(np.ascontiguousarray(combined))
