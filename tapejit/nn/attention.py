"""Attention: ``F.scaled_dot_product_attention``, ``F.multi_head_attention_forward`` and
``nn.MultiheadAttention``, composed from the core's differentiable ops (matmul, where,
softmax, linear, cat): no opcodes of their own.  Parameter names and shapes are torch's,
so a torch ``state_dict`` loads."""
import math

import numpy as np

from tapejit import dtypes
from tapejit.api import argument_error
from tapejit.nn import init
from tapejit.nn.layers import Linear, _float_dtype
from tapejit.nn.module import Module
from tapejit.nn.parameter import Parameter
from tapejit.creation import empty
from tapejit.ops.softmax import softmax
from tapejit.ops.linalg import linear
from tapejit.ops.indexing import where
from tapejit.ops.join import cat
from tapejit.recording import narrowed, wide
from tapejit.tensor import Tensor, _concrete

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward", "MultiheadAttention"]


# torch's SDPA checks print C++ type names
_CPP_TYPE_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "bool": "bool", "int32": "int",
                   "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "float16": "c10::Half",
                   "bfloat16": "c10::BFloat16"}


def _dtype_name(dt):
    return _CPP_TYPE_NAMES[dt.name]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(query @ key^T * scale + bias) @ value`` over the last two dims, the batch
    dims broadcast.  A bool ``attn_mask`` says which positions take part (True = attend),
    a float one is added to the scores; ``is_causal`` keeps the lower triangle (top-left
    aligned) and refuses an explicit mask, as torch.  A row with no position left gives
    zeros (and zero gradients), as torch 2.5+'s safe softmax.  ``dropout_p`` is applied to
    the weights whatever the module's mode (torch's SDPA has no ``training`` flag)."""
    from tapejit.nn.functional import dropout
    for position, (name, t) in enumerate((("query", query), ("key", key), ("value", value)), 1):
        if not isinstance(t, Tensor):
            raise argument_error("scaled_dot_product_attention", name, position, t, "Tensor")
    if query._dtype is not key._dtype or query._dtype is not value._dtype:
        raise RuntimeError("Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{_dtype_name(query._dtype)} key.dtype: {_dtype_name(key._dtype)} and value.dtype: "
                           f"{_dtype_name(value._dtype)} instead.")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise RuntimeError("Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.dim()} key.dim: {key.dim()} and value.dim: {value.dim()} instead.")
    if not query._dtype.is_floating_point:
        raise dtypes.not_implemented("scaled_dot_product_attention", query._dtype)
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise argument_error("scaled_dot_product_attention", "attn_mask", 4, attn_mask, "Tensor")
    if attn_mask is not None and attn_mask._dtype not in (dtypes.bool_, dtypes.float32, query._dtype):
        raise RuntimeError("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {_dtype_name(attn_mask._dtype)} and  query.dtype: "
                           f"{_dtype_name(query._dtype)} instead.")
    if not 0.0 <= dropout_p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if query._dtype.narrow:   # torch's CPU kernel computes float16/bfloat16 in float32, rounding the output once
        return narrowed(scaled_dot_product_attention(wide(query), wide(key), wide(value),
                                                     None if attn_mask is None else wide(attn_mask),
                                                     dropout_p, is_causal, scale, enable_gqa), query._dtype)
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3:
        heads, key_heads, value_heads = query._shape[-3], key._shape[-3], value._shape[-3]
        if key_heads != value_heads or heads % key_heads:
            raise RuntimeError(f"Number of heads in key and value must divide the number of heads in query "
                               f"(query heads {heads}, key heads {key_heads}, value heads {value_heads})")
        if key_heads != heads:
            pick = np.repeat(np.arange(key_heads), heads // key_heads)
            key = key[..., pick, :, :]
            value = value[..., pick, :, :]
    target, source = query._shape[-2], key._shape[-2]
    scale_factor = 1.0 / math.sqrt(query._shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale_factor
    # keep: which scores take part (None: all); bias: a float mask added to the scores
    keep = bias = None
    if is_causal:
        keep = np.tril(np.ones((target, source), dtype=bool))
    elif attn_mask is not None and attn_mask._dtype is dtypes.bool_:
        keep = attn_mask._value()
    elif attn_mask is not None:
        bias = attn_mask
    if keep is not None or bias is not None:
        mask_shape = tuple(keep.shape if keep is not None else bias._shape)
        try:
            shape = np.broadcast_shapes(tuple(scores._shape), mask_shape)
        except ValueError:
            shape = None
        if shape != tuple(scores._shape):
            raise RuntimeError(f"scaled_dot_product_attention: attn_mask of shape {list(mask_shape)} does not "
                               f"broadcast to the attention weights' shape {list(scores._shape)} (query "
                               f"{list(query._shape)}, key {list(key._shape)})")
    empty_rows = None
    if keep is not None:
        empty_rows = ~keep.any(axis=-1, keepdims=True)
        if empty_rows.any():   # attend everywhere there, then zero the row: finite gradients
            keep = keep | empty_rows
        else:
            empty_rows = None
        if not keep.all():
            # an added constant 0/-inf bias: its record costs a sixth of a where's (fwd+bwd)
            scores = scores + _concrete(np.where(keep, 0.0, -np.inf).astype(scores._dtype.np))
    elif bias is not None:
        blocked = np.isneginf(bias._value())
        empty_rows = blocked.all(axis=-1, keepdims=True) if blocked.shape[-1] else None
        if empty_rows is not None and empty_rows.any():
            bias = where(_concrete(empty_rows), _concrete(np.array(0.0, bias._dtype.np)), bias)
        else:
            empty_rows = None
        scores = scores + bias
    weights = softmax(scores, -1)
    if empty_rows is not None:
        weights = weights * _concrete((~empty_rows).astype(weights._dtype.np))
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """torch's ``F._canonical_mask``: a bool mask becomes a float one (-inf where True, the
    positions to leave out), a float mask stays; other dtypes are refused."""
    if mask is None:
        return None
    if mask._dtype is not dtypes.bool_ and not mask._dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask._dtype is not other_type:
        import warnings
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for both "
                      "instead.", stacklevel=3)
    if mask._dtype is dtypes.bool_:
        return _concrete(np.where(mask._value(), -np.inf, 0.0).astype(target_type.np))
    return mask


def _none_or_dtype(input):
    if input is None:
        return None
    if isinstance(input, Tensor):
        return input._dtype
    raise RuntimeError("input to _none_or_dtype() must be None or torch.Tensor")


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's checks; True when the inputs are batched (3-d)."""
    if query.dim() == 3:
        is_batched = True
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError("For batched (3-D) `query`, expected `key` and `value` to be 3-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError("For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError("For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but "
                                 f"found {attn_mask.dim()}-D tensor instead")
    elif query.dim() == 2:
        is_batched = False
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError("For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError("For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError("For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                                     f"but found {attn_mask.dim()}-D tensor instead")
            if attn_mask.dim() == 3:
                expected = (num_heads, query._shape[0], key._shape[0])
                if tuple(attn_mask._shape) != expected:
                    raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                         f"{tuple(attn_mask._shape)}")
    else:
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D "
                             "query tensor")
    return is_batched


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch's multi-head attention on ``(L, N, E)`` inputs (or unbatched ``(L, E)``):
    project, split into heads, attend, merge, project out.  Returns ``(output, weights)``,
    ``weights`` None unless ``need_weights`` (averaged over the heads when
    ``average_attn_weights``)."""
    from tapejit.nn.functional import dropout, pad
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query._shape
    src_len = key._shape[0]
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", _none_or_dtype(attn_mask), "attn_mask",
                                       query._dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        # the mask is the causal one by the caller's word: SDPA builds it
        attn_mask = None
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query._dtype, check_other=False)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key._shape[:2]) != tuple(value._shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {tuple(key._shape[:2])} do not match value's "
                                 f"{tuple(value._shape[:2])}")
        b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        q = linear(query, q_proj_weight, b_q)
        k = linear(key, k_proj_weight, b_k)
        v = linear(value, v_proj_weight, b_v)
    else:
        if tuple(key._shape) != tuple(value._shape):
            raise AssertionError(f"key shape {tuple(key._shape)} does not match value shape {tuple(value._shape)}")
        w_q, w_k, w_v = in_proj_weight.chunk(3)
        b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        if query is key and key is value:   # self-attention: one projection, as torch's packed path
            q, k, v = linear(query, in_proj_weight, in_proj_bias).unflatten(-1, (3, embed_dim)).unbind(-2)
        else:
            q, k, v = linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask._shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.size()}, but should be "
                                   f"{(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            if tuple(attn_mask._shape) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.size()}, but should be "
                                   f"{(bsz * num_heads, tgt_len, src_len)}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise AssertionError("bias cannot be added to static key/value.")
        k = cat([k, bias_k.repeat(1, bsz, 1)])
        v = cat([v, bias_v.repeat(1, bsz, 1)])
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k and bias_v must both be given or both be None")
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = _heads(k, static_k, "static_k", bsz, num_heads, head_dim)
    v = _heads(v, static_v, "static_v", bsz, num_heads, head_dim)
    if add_zero_attn:
        zeros = _concrete(np.zeros((bsz * num_heads, 1, head_dim), k._dtype.np))
        k = cat([k, zeros], 1)
        v = cat([v, _concrete(np.zeros((bsz * num_heads, 1, head_dim), v._dtype.np))], 1)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
    src_len = k._shape[1]
    if key_padding_mask is not None:
        if tuple(key_padding_mask._shape) != (bsz, src_len):
            raise AssertionError(f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                                 f"{tuple(key_padding_mask._shape)}")
        key_padding_mask = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1).reshape(
            bsz * num_heads, 1, src_len)
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if not training:
        dropout_p = 0.0
    if need_weights:
        if is_causal and attn_mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        scores = (q * math.sqrt(1.0 / float(head_dim))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = softmax(scores, -1)
        if dropout_p > 0.0:
            weights = dropout(weights, p=dropout_p)
        out = (weights @ v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not is_batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:
        if attn_mask._shape[0] == 1 and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
    if not is_batched:
        out = out.squeeze(1)
    return out, None


def _heads(t, static, name, bsz, num_heads, head_dim):
    """``(S, N, E)`` -> ``(N * heads, S, head_dim)``, or the given static key/value."""
    if static is None:
        return t.reshape(t._shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    if static._shape[0] != bsz * num_heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * num_heads}, but got {static._shape[0]}")
    if static._shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {static._shape[2]}")
    return static


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for ``MultiheadAttention.out_proj`` (a plain ``Linear``)."""


class MultiheadAttention(Module):
    """torch's ``nn.MultiheadAttention``: ``in_proj_weight`` (3E, E) and ``in_proj_bias``
    (3E), or ``q/k/v_proj_weight`` when ``kdim``/``vdim`` differ from ``embed_dim``;
    ``out_proj`` a ``Linear``; ``bias_k``/``bias_v`` (1, 1, E) with ``add_bias_kv``.
    Initialised as torch (xavier-uniform projections, zero biases)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != self.embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        dt = _float_dtype(dtype)
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(empty((embed_dim, embed_dim), dtype=dt))
            self.k_proj_weight = Parameter(empty((embed_dim, self.kdim), dtype=dt))
            self.v_proj_weight = Parameter(empty((embed_dim, self.vdim), dtype=dt))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(empty((3 * embed_dim, embed_dim), dtype=dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dt)
        if add_bias_kv:
            self.bias_k = Parameter(empty((1, 1, embed_dim), dtype=dt))
            self.bias_v = Parameter(empty((1, 1, embed_dim), dtype=dt))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if query.dim() not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D "
                                 "query tensor")
        is_batched = query.dim() == 3
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", _none_or_dtype(attn_mask),
                                           "attn_mask", query._dtype)
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query._dtype, check_other=False)
        if self.batch_first and is_batched:
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and is_batched:
            return out.transpose(1, 0), weights
        return out, weights
