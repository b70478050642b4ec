"""Reference semantics of the five operators (see ../shared/spec/OPS.md), in float32."""

from __future__ import annotations

import numpy as np

F32 = np.float32
NONE, MEAN, SUM = 0, 1, 2


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """Round float32 values to `dtype` (fp16/bf16: nearest even) and return them as float32."""
    return np.asarray(x, F32).astype(dtype).astype(F32)


def pack_target_mask(mask) -> np.ndarray:
    """Bool mask (True = target not in this shard) → bit-packed uint8, least significant bit first."""
    return np.packbits(np.asarray(mask, dtype=np.uint8), bitorder="little")


def unpack_target_mask(target_mask, bt: int) -> np.ndarray:
    """The (BT,) 0/1 float32 mask from a bool (BT,) or bit-packed uint8 (≥ ceil(BT/8)) tensor."""
    tm = np.asarray(target_mask)
    if tm.ndim != 1:
        raise ValueError("target_mask must be 1-D")
    if tm.dtype == np.bool_:
        if tm.shape[0] != bt:
            raise ValueError("a bool target_mask must have BT elements")
        return tm.astype(F32)
    if tm.dtype == np.uint8:
        if tm.shape[0] * 8 < bt:
            raise ValueError("a uint8 target_mask needs at least ceil(BT/8) bytes")
        return np.unpackbits(tm, bitorder="little")[:bt].astype(F32)
    raise TypeError("target_mask must be bool or uint8")


def fused_linear_cross_entropy_loss_grad(
    grad, input, weight, target_mask, masked_target, label_smoothing=0.0,
    logits_max=None, sum_exp_logits=None, softmax=None, round_grad_logits_to=None,
):
    """(input_grad (BT,H), weight_grad (V,H)) in float32. `round_grad_logits_to` (a dtype)
    rounds the logit gradient G before the two GEMMs, as the fp16/bf16 device kernel does."""
    g = np.asarray(grad, F32)
    x = np.asarray(input, F32)
    w = np.asarray(weight, F32)
    if g.ndim != 1 or x.ndim != 2 or w.ndim != 2:
        raise ValueError("grad must be 1-D, input and weight 2-D")
    bt, h = x.shape
    v = w.shape[0]
    if g.shape[0] != bt or w.shape[1] != h:
        raise ValueError("input must be (BT, H) and weight (V, H)")
    if label_smoothing != 0:
        raise ValueError("only label_smoothing == 0 is supported")
    mt = np.asarray(masked_target)
    if mt.shape != (bt,) or mt.dtype.kind not in "iu":
        raise ValueError("masked_target must be an integer (BT,) tensor")
    mask = unpack_target_mask(target_mask, bt)
    if softmax is not None:
        p = np.array(softmax, dtype=F32)
        if p.shape != (bt, v):
            raise ValueError("softmax must be (BT, V)")
    else:
        if logits_max is None or sum_exp_logits is None:
            raise ValueError("need softmax, or both logits_max and sum_exp_logits")
        lm, se = np.asarray(logits_max, F32), np.asarray(sum_exp_logits, F32)
        if lm.shape != (bt,) or se.shape != (bt,):
            raise ValueError("logits_max and sum_exp_logits must be (BT,)")
        p = np.exp(x @ w.T - lm[:, None]) / se[:, None]
    rows = np.nonzero(mask == 0)[0]
    cols = mt[rows].astype(np.int64)
    if np.any((cols < 0) | (cols >= v)):
        raise ValueError("masked_target out of [0, V) on an unmasked row")
    p[rows, cols] -= F32(1)
    gl = p * g[:, None]
    if round_grad_logits_to is not None:
        gl = round_to(gl, round_grad_logits_to)
    return gl @ w, gl.T @ x


def embedding_dense_backward(grad, indices, num_weights, padding_idx=-1, scale_grad_by_freq=False):
    """(num_weights, D) float32: rows of grad summed into the rows their indices name."""
    g = np.asarray(grad)
    idx = np.asarray(indices)
    if not 1 <= g.ndim <= 8 or idx.ndim > 8:
        raise ValueError("grad must have 1 to 8 dims, indices at most 8")
    num_weights = int(num_weights)
    if num_weights < 0:
        raise ValueError("num_weights must be >= 0")
    d = g.shape[-1]
    n = int(np.prod(g.shape[:-1], dtype=np.int64))
    if d != 0 and n != idx.size:
        raise ValueError("prod(grad.shape[:-1]) must equal indices.size")
    out = np.zeros((num_weights, d), F32)
    if idx.size == 0 or g.size == 0:
        return out
    flat = idx.reshape(-1).astype(np.int64)
    if np.any((flat < 0) | (flat >= num_weights)):
        raise ValueError("indices must lie in [0, num_weights)")
    rows = g.reshape(n, d).astype(F32)
    pad = int(padding_idx)
    pad = pad - (1 << 64) if pad >= (1 << 63) else pad
    if scale_grad_by_freq:
        counts = np.bincount(flat, minlength=num_weights).astype(F32)
        rows = rows / counts[flat][:, None]
    keep = flat != pad
    np.add.at(out, flat[keep], rows[keep])
    return out


def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """Gradient w.r.t. the log-probabilities `self` ((N,C) or (C,)); float32, shape of self."""
    s = np.asarray(self)
    t = np.asarray(target)
    w = np.asarray(weight, F32)
    go = np.asarray(grad_output, F32)
    tw = np.asarray(total_weight, F32)
    if reduction not in (NONE, MEAN, SUM):
        raise ValueError("reduction must be 0, 1 or 2")
    if s.ndim not in (1, 2) or t.ndim > 1:
        raise ValueError("self must be 1-D or 2-D, target 0-D or 1-D")
    if s.ndim == 1 and t.ndim == 1:
        raise ValueError("1-D self needs a 0-D target")
    if s.ndim == 2 and (t.ndim != 1 or t.shape[0] != s.shape[0]):
        raise ValueError("target must be (N,)")
    c = s.shape[-1]
    if w.shape != (c,) or tw.size != 1:
        raise ValueError("weight must be (C,) and total_weight one element")
    per_sample = reduction == NONE and s.ndim == 2
    if per_sample and go.shape != (s.shape[0],):
        raise ValueError("grad_output must be (N,) for reduction none")
    if not per_sample and go.size != 1:
        raise ValueError("grad_output must have one element")
    tt = t.reshape(-1).astype(np.int64)
    valid = tt != int(ignore_index)
    if np.any((tt[valid] < 0) | (tt[valid] >= c)):
        raise ValueError("target out of [0, C) and not ignore_index")
    if per_sample:
        scale = go
    else:
        scale = np.full(tt.shape, go.reshape(-1)[0], F32)
        if reduction == MEAN:
            scale = scale / tw.reshape(-1)[0]
    out = np.zeros((tt.size, c), F32)
    r = np.nonzero(valid)[0]
    out[r, tt[r]] = -w[tt[r]] * scale[r]
    return out.reshape(s.shape)


def apply_fused_ema_adam(grad, var, m, v, s, step, lr=1e-3, ema_decay=0.9999, beta1=0.9,
                         beta2=0.999, eps=1e-8, mode=1, bias_correction=True, weight_decay=0.0):
    """One Adam/AdamW step then the parameter EMA; updates var, m, v, s in place and returns them."""
    arrays = [np.asarray(a) for a in (grad, var, m, v, s)]
    if any(a.shape != arrays[0].shape or a.dtype != arrays[0].dtype for a in arrays):
        raise ValueError("grad, var, m, v, s must share shape and dtype")
    if mode not in (0, 1):
        raise ValueError("mode must be 0 or 1")
    st = np.asarray(step)
    if st.size != 1 or st.dtype.kind not in "iu":
        raise ValueError("step must be a one-element integer tensor")
    k = F32(st.reshape(-1)[0])
    lr, d, b1, b2, eps, wd = (F32(x) for x in (lr, ema_decay, beta1, beta2, eps, weight_decay))
    if bias_correction:
        if k < 1:
            raise ValueError("step must be >= 1 with bias correction")
        c1, c2 = F32(1) - b1**k, F32(1) - b2**k
    else:
        c1 = c2 = F32(1)
    g, p = grad.astype(F32), var.astype(F32)
    if mode == 0:
        g = g + wd * p
    m_new = b1 * m.astype(F32) + (F32(1) - b1) * g
    v_new = b2 * v.astype(F32) + (F32(1) - b2) * g * g
    u = (m_new / c1) / (np.sqrt(v_new / c2) + eps)
    if mode == 1:
        u = u + wd * p
    p_new = p - lr * u
    s_new = d * s.astype(F32) + (F32(1) - d) * p_new
    for dst, src in ((var, p_new), (m, m_new), (v, v_new), (s, s_new)):
        dst[...] = src.astype(dst.dtype)
    return var, m, v, s


def binary_cross_entropy_grad(input_x, input_y, dloss, weight=None, reduction=MEAN, eps=1e-12):
    """dx = u·w·(x − y)/max(x(1 − x), eps) in float32, shape of input_x."""
    x = np.asarray(input_x, F32)
    y = np.asarray(input_y, F32)
    dl = np.asarray(dloss, F32)
    if reduction not in (NONE, MEAN, SUM):
        raise ValueError("reduction must be 0, 1 or 2")
    if y.shape != x.shape or (weight is not None and np.shape(weight) != x.shape):
        raise ValueError("input_y and weight must have the shape of input_x")
    if reduction == NONE:
        if dl.size != x.size:
            raise ValueError("dloss must have one value per element for reduction none")
        u = dl.reshape(x.shape)
    else:
        if dl.size != 1:
            raise ValueError("dloss must have one element for mean/sum")
        with np.errstate(divide="ignore", invalid="ignore"):  # mean over zero elements
            u = dl.reshape(-1)[0] / (F32(x.size) if reduction == MEAN else F32(1))
    dx = u * (x - y) / np.maximum(x * (F32(1) - x), F32(eps))
    if weight is not None:
        dx = dx * np.asarray(weight, F32)
    return dx.astype(F32)
