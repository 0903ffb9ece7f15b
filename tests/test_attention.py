"""Attention and transformer layers against torch: values and gradients (float64 tight,
float32 loose), masks, causal, padding masks, batch_first both ways, need_weights."""
import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit.testing import check_grads

# torch's notes on its own fast path, and the deprecation warning both libraries give for a
# bool padding mask with a float attention mask (checked once, in
# test_multihead_attention_warns_on_mixed_mask_types)
pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
              pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning")]


def _pair(rng, torch, *shapes, dtype=np.float64):
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return ([tj.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _close(ours, theirs, dtype=np.float64):
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.detach()), theirs.detach().numpy(), **tol)


MASKS = ["none", "causal", "bool", "float", "bool_empty_row", "float_empty_row", "scale", "bool_batched"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mask", MASKS)
def test_sdpa_matches_torch(mask, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(MASKS.index(mask))
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), dtype=dtype)
    keep = rng.random((4, 6)) > 0.4
    keep[:, 0] = True
    if mask.endswith("empty_row"):
        keep[1] = False   # torch 2.5+ gives zeros (and zero gradients) for a row with nothing to attend
    kwargs, tkwargs = {}, {}
    if mask == "causal":
        kwargs = tkwargs = {"is_causal": True}
    elif mask.startswith("bool"):
        if mask == "bool_batched":   # (N, 1, L, S): broadcast over the heads
            keep = rng.random((2, 1, 4, 6)) > 0.4
        kwargs, tkwargs = {"attn_mask": tj.tensor(keep)}, {"attn_mask": torch.tensor(keep)}
    elif mask.startswith("float"):
        bias = np.where(keep, rng.standard_normal(keep.shape), -np.inf).astype(dtype)
        kwargs, tkwargs = {"attn_mask": tj.tensor(bias)}, {"attn_mask": torch.tensor(bias)}
    elif mask == "scale":
        kwargs = tkwargs = {"scale": 0.3}
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **tkwargs)
    _close(out, expected, dtype)
    weights = rng.standard_normal(tuple(out.shape)).astype(dtype)
    (out * tj.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for ours, theirs in zip((q, k, v), (tq, tk, tv)):
        _close(ours.grad, theirs.grad, dtype)


def test_sdpa_broadcasts_batch_dims_and_gqa():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 4, 3, 5), (1, 4, 6, 5), (4, 6, 5))
    _close(F.scaled_dot_product_attention(q, k, v), torch.nn.functional.scaled_dot_product_attention(tq, tk, tv))
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5))
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    _close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _close(k.grad, tk.grad)


def test_sdpa_dropout_is_reproducible_and_scaled():
    q = tj.randn(2, 3, 4)
    tj.manual_seed(3)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    tj.manual_seed(3)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # dropout_p=1 drops every weight: torch gives zeros
    np.testing.assert_array_equal(np.asarray(F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)), 0.0)


def test_sdpa_errors_as_torch():
    torch = pytest.importorskip("torch")
    q = np.random.default_rng(0).standard_normal((2, 3, 4))
    k = np.random.default_rng(1).standard_normal((2, 5, 4))
    cases = [
        ((q, k, k), {"attn_mask": np.ones((3, 5), bool), "is_causal": True}, "Explicit attn_mask should not be set"),
        ((q[0, 0], k[0, 0], k[0, 0]), {}, "at least 2 dimensional"),
        ((q, k, k), {"attn_mask": np.zeros((3, 5), np.int64)}, "attn_mask.dtype: long int and  query.dtype: double"),
        ((q.astype(np.float32), k.astype(np.float32), k.astype(np.float32)), {"attn_mask": np.zeros((3, 5))},
         "attn_mask.dtype: double and  query.dtype: float"),
        ((q, k, k.astype(np.float32)), {}, "key.dtype: double and value.dtype: float instead"),
        ((q, k, k), {"dropout_p": 1.5}, "dropout probability has to be between 0 and 1"),
        ((q[0], k[0], k[0]), {"attn_mask": np.ones((2, 3, 5), bool)}, None),
    ]
    for args, kwargs, message in cases:
        mask = kwargs.pop("attn_mask", None)
        with pytest.raises(RuntimeError):
            torch.nn.functional.scaled_dot_product_attention(
                *map(torch.tensor, args), attn_mask=None if mask is None else torch.tensor(mask), **kwargs)
        with pytest.raises(RuntimeError, match=message):
            F.scaled_dot_product_attention(*map(tj.tensor, args), attn_mask=None if mask is None else tj.tensor(mask),
                                           **kwargs)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_sdpa_finite_differences(mask):
    rng = np.random.default_rng(5)
    keep = rng.random((3, 4)) > 0.4
    keep[:, 0] = True
    kwargs = {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": tj.tensor(keep)}}.get(mask)
    if mask == "float":   # a float mask is differentiable too
        check_grads(lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b),
                    [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 3)),
                     rng.standard_normal((3, 4))])
        return
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
                [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 3))])


def _load_torch_state(module, torch_module):
    module.load_state_dict({name: tj.tensor(value.detach().numpy()) for name, value in
                            torch_module.state_dict().items()})


def _grads_match(module, torch_module, dtype=np.float64):
    theirs = dict(torch_module.named_parameters())
    names = [name for name, p in module.named_parameters()]
    assert names == list(theirs)
    for name, p in module.named_parameters():
        assert p.grad is not None, name
        _close(p.grad, theirs[name].grad, dtype)


MHA_CONFIGS = {
    "default": {},
    "kdim_vdim": {"kdim": 3, "vdim": 5},
    "bias_kv_zero_attn": {"add_bias_kv": True, "add_zero_attn": True},
    "no_bias": {"bias": False},
    "batch_first": {"batch_first": True},
}
MHA_MASKS = ["none", "key_padding", "attn_bool", "attn_float_3d", "both", "causal"]


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", MHA_MASKS)
@pytest.mark.parametrize("config", list(MHA_CONFIGS))
def test_multihead_attention_matches_torch(config, masks, need_weights):
    torch = pytest.importorskip("torch")
    kwargs = MHA_CONFIGS[config]
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64, **kwargs)
    ours = tj.nn.MultiheadAttention(8, 2, dtype=tj.float64, **kwargs)
    assert [(n, tuple(p.shape)) for n, p in ours.state_dict().items()] == \
           [(n, tuple(p.shape)) for n, p in theirs.state_dict().items()]
    _load_torch_state(ours, theirs)
    rng = np.random.default_rng(MHA_MASKS.index(masks))
    shape = (lambda length, d: (2, length, d)) if kwargs.get("batch_first") else (lambda length, d: (length, 2, d))
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, shape(3, 8), shape(4, kwargs.get("kdim", 8)),
                                    shape(4, kwargs.get("vdim", 8)))
    padding = np.zeros((2, 4), bool)
    padding[0, 3] = padding[1, 1] = True
    keep_out = rng.random((3, 4)) > 0.7
    keep_out[:, 0] = False
    options = {"none": {}, "key_padding": {"key_padding_mask": padding}, "attn_bool": {"attn_mask": keep_out},
               "attn_float_3d": {"attn_mask": rng.standard_normal((4, 3, 4))},
               "both": {"attn_mask": keep_out, "key_padding_mask": padding},
               "causal": {"attn_mask": np.triu(np.ones((3, 4), bool), 1), "is_causal": True}}[masks]
    if masks == "causal" and need_weights:
        options = dict(options, is_causal=False)
    call = {name: tj.tensor(value) if isinstance(value, np.ndarray) else value for name, value in options.items()}
    tcall = {name: torch.tensor(value) if isinstance(value, np.ndarray) else value for name, value in options.items()}
    out, weights = ours(q, k, v, need_weights=need_weights, **call)
    expected, expected_weights = theirs(tq, tk, tv, need_weights=need_weights, **tcall)
    _close(out, expected)
    assert (weights is None) == (expected_weights is None)
    if weights is not None:
        _close(weights, expected_weights)
    seed = rng.standard_normal(tuple(out.shape))
    (out * tj.tensor(seed)).sum().backward()
    (expected * torch.tensor(seed)).sum().backward()
    _grads_match(ours, theirs)
    for mine, torchs in zip((q, k, v), (tq, tk, tv)):
        _close(mine.grad, torchs.grad)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_self_attention_unbatched_and_per_head_weights(batch_first):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(6, 3, dropout=0.5, batch_first=batch_first)
    ours = tj.nn.MultiheadAttention(6, 3, dropout=0.5, batch_first=batch_first)
    _load_torch_state(ours, theirs)
    ours.eval()
    theirs.eval()   # dropout off: comparable
    rng = np.random.default_rng(2)
    for shape in ((4, 2, 6), (4, 6)):
        (x,), (tx,) = _pair(rng, torch, shape, dtype=np.float32)
        out, weights = ours(x, x, x, average_attn_weights=False)
        expected, expected_weights = theirs(tx, tx, tx, average_attn_weights=False)
        _close(out, expected, np.float32)
        _close(weights, expected_weights, np.float32)
        out.sum().backward()
        expected.sum().backward()
        _close(x.grad, tx.grad, np.float32)
        _grads_match(ours, theirs, np.float32)
        ours.zero_grad()
        theirs.zero_grad()


def test_multihead_attention_construction_errors_and_repr():
    torch = pytest.importorskip("torch")
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        tj.nn.MultiheadAttention(7, 2)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
        tj.nn.MultiheadAttention(0, 2)
    torch.manual_seed(0)
    assert repr(tj.nn.MultiheadAttention(8, 2)) == repr(torch.nn.MultiheadAttention(8, 2))
    mha = tj.nn.MultiheadAttention(8, 2)
    x = tj.randn(3, 2, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match=r"The shape of the 2D attn_mask is"):
        mha(x, x, x, attn_mask=tj.zeros(2, 2))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask are supported"):
        mha(x, x, x, attn_mask=tj.zeros(3, 3, dtype=tj.int64))


def _activation(name, torch):
    """The same activation on each side: a string, or a callable (torch's own for torch)."""
    if name == "callable":
        return (lambda x: tj.nn.functional.silu(x)), (lambda x: torch.nn.functional.silu(x))
    return name, name


def _backward_both(out, expected, rng):
    seed = rng.standard_normal(tuple(out.shape)).astype(np.asarray(out.detach()).dtype)
    (out * tj.tensor(seed)).sum().backward()
    (expected * __import__("torch").tensor(seed)).sum().backward()


ENCODER_CASES = [
    # (batch_first, norm_first, activation, dtype, masks)
    (False, False, "relu", np.float64, "padding"),
    (True, True, "gelu", np.float64, "causal"),
    (True, False, "callable", np.float64, "both"),
    (False, True, "relu", np.float32, "both"),
]


@pytest.mark.parametrize("batch_first, norm_first, activation, dtype, masks", ENCODER_CASES)
def test_transformer_encoder_matches_torch(batch_first, norm_first, activation, dtype, masks):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    ours_act, theirs_act = _activation(activation, torch)
    theirs_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, activation=theirs_act, batch_first=batch_first,
                                                    norm_first=norm_first, dtype=tdtype)
    theirs = torch.nn.TransformerEncoder(theirs_layer, 2, norm=torch.nn.LayerNorm(8, dtype=tdtype),
                                         enable_nested_tensor=False)
    ours_layer = tj.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, activation=ours_act, batch_first=batch_first,
                                               norm_first=norm_first, dtype=tj.float64 if dtype == np.float64
                                               else tj.float32)
    ours = tj.nn.TransformerEncoder(ours_layer, 2, norm=tj.nn.LayerNorm(8, dtype=ours_layer.linear1.weight.dtype))
    _load_torch_state(ours, theirs)
    ours.eval()
    theirs.eval()   # dropout is the identity in eval mode
    rng = np.random.default_rng(3)
    (src,), (tsrc,) = _pair(rng, torch, (2, 5, 8) if batch_first else (5, 2, 8), dtype=dtype)
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True
    causal = np.triu(np.full((5, 5), -np.inf), 1).astype(dtype)
    call, tcall = {}, {}
    if masks in ("padding", "both"):
        call["src_key_padding_mask"], tcall["src_key_padding_mask"] = tj.tensor(padding), torch.tensor(padding)
    if masks in ("causal", "both"):
        call["mask"], tcall["mask"] = tj.tensor(causal), torch.tensor(causal)
    out = ours(src, **call)
    expected = theirs(tsrc, **tcall)
    _close(out, expected, dtype)
    _backward_both(out, expected, rng)
    _grads_match(ours, theirs, dtype)
    _close(src.grad, tsrc.grad, dtype)


@pytest.mark.parametrize("batch_first, norm_first", [(False, False), (True, True)])
def test_transformer_matches_torch(batch_first, norm_first):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    theirs = torch.nn.Transformer(8, 2, 2, 2, 16, dropout=0.2, activation="gelu", batch_first=batch_first,
                                  norm_first=norm_first, dtype=torch.float64)
    ours = tj.nn.Transformer(8, 2, 2, 2, 16, dropout=0.2, activation="gelu", batch_first=batch_first,
                             norm_first=norm_first, dtype=tj.float64)
    assert [(n, tuple(p.shape)) for n, p in ours.state_dict().items()] == \
           [(n, tuple(p.shape)) for n, p in theirs.state_dict().items()]
    _load_torch_state(ours, theirs)
    ours.eval()
    theirs.eval()
    rng = np.random.default_rng(4)
    shape = (lambda length: (2, length, 8)) if batch_first else (lambda length: (length, 2, 8))
    (src, tgt), (tsrc, ttgt) = _pair(rng, torch, shape(5), shape(4))
    tgt_mask = ours.generate_square_subsequent_mask(4, dtype=tj.float64)
    ttgt_mask = theirs.generate_square_subsequent_mask(4, dtype=torch.float64)
    np.testing.assert_array_equal(np.asarray(tgt_mask), ttgt_mask.numpy())
    padding = np.zeros((2, 5), bool)
    padding[0, 4] = True
    tgt_padding = np.zeros((2, 4), bool)
    tgt_padding[1, 3] = True
    out = ours(src, tgt, tgt_mask=tgt_mask, src_key_padding_mask=tj.tensor(padding),
               tgt_key_padding_mask=tj.tensor(tgt_padding), memory_key_padding_mask=tj.tensor(padding))
    expected = theirs(tsrc, ttgt, tgt_mask=ttgt_mask, src_key_padding_mask=torch.tensor(padding),
                      tgt_key_padding_mask=torch.tensor(tgt_padding), memory_key_padding_mask=torch.tensor(padding))
    _close(out, expected)
    _backward_both(out, expected, rng)
    _grads_match(ours, theirs)
    _close(src.grad, tsrc.grad)
    _close(tgt.grad, ttgt.grad)


def test_transformer_decoder_causal_hint_and_unbatched():
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    theirs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 4, 12, dropout=0.0,
                                                                          dtype=torch.float64), 2)
    ours = tj.nn.TransformerDecoder(tj.nn.TransformerDecoderLayer(8, 4, 12, dropout=0.0, dtype=tj.float64), 2)
    _load_torch_state(ours, theirs)
    rng = np.random.default_rng(6)
    for tgt_shape, mem_shape in (((4, 3, 8), (6, 3, 8)), ((4, 8), (6, 8))):
        (tgt, memory), (ttgt, tmemory) = _pair(rng, torch, tgt_shape, mem_shape)
        mask = tj.nn.Transformer.generate_square_subsequent_mask(4, dtype=tj.float64)
        tmask = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
        out = ours(tgt, memory, tgt_mask=mask, tgt_is_causal=True)
        expected = theirs(ttgt, tmemory, tgt_mask=tmask, tgt_is_causal=True)
        _close(out, expected)
        _backward_both(out, expected, rng)
        _grads_match(ours, theirs)
        _close(memory.grad, tmemory.grad)
        ours.zero_grad()
        theirs.zero_grad()


def test_transformer_training_dropout_and_errors():
    torch = pytest.importorskip("torch")
    layer = tj.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = tj.randn(3, 2, 8)
    tj.manual_seed(0)
    a = layer(x)
    tj.manual_seed(0)
    np.testing.assert_array_equal(np.asarray(a.detach()), np.asarray(layer(x).detach()))
    layer.eval()
    np.testing.assert_array_equal(np.asarray(layer(x).detach()), np.asarray(layer(x).detach()))
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        torch.nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        tj.nn.TransformerEncoderLayer(8, 2, activation="tanh")
    model = tj.nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(tj.randn(5, 2, 8), tj.randn(4, 3, 8))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        model(tj.randn(5, 2, 8), tj.randn(4, 2, 6))
    decoder_layer = tj.nn.TransformerDecoderLayer(8, 2, 16)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        decoder_layer(tj.randn(4, 2, 8), tj.randn(5, 2, 8), tgt_is_causal=True)


@pytest.mark.filterwarnings("error:Support for mismatched:UserWarning")
def test_multihead_attention_warns_on_mixed_mask_types():
    torch = pytest.importorskip("torch")
    padding = np.zeros((2, 3), bool)
    bias = np.zeros((3, 3))
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn_mask is deprecated"):
        x = torch.zeros(3, 2, 4)
        torch.nn.MultiheadAttention(4, 2)(x, x, x, key_padding_mask=torch.tensor(padding),
                                          attn_mask=torch.tensor(bias, dtype=torch.float32))
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn_mask is deprecated"):
        x = tj.zeros(3, 2, 4)
        tj.nn.MultiheadAttention(4, 2)(x, x, x, key_padding_mask=tj.tensor(padding),
                                       attn_mask=tj.tensor(bias, dtype=tj.float32))


def test_attention_under_compile_replays_new_masks():
    from tapejit.replay.trace import CompileError
    mha = tj.nn.MultiheadAttention(4, 2)
    x = tj.randn(3, 2, 4)
    first = tj.tensor(np.array([[False, False, True], [False, False, False]]))
    second = tj.tensor(np.array([[True, False, True], [False, True, False]]))
    compiled = tj.compile(lambda x, padding: mha(x, x, x, key_padding_mask=padding, need_weights=False)[0])
    for padding in (first, second, first):
        np.testing.assert_allclose(np.asarray(compiled(x, padding).detach()),
                                   np.asarray(mha(x, x, x, key_padding_mask=padding, need_weights=False)[0].detach()),
                                   rtol=1e-6)
    # a mask the function closes over is read as a value: refused, never frozen into the replays
    captured = tj.tensor(np.tril(np.ones((3, 3), bool)))
    with pytest.raises(CompileError, match="scaled_dot_product_attention reads a traced tensor's value"):
        tj.compile(lambda q: F.scaled_dot_product_attention(q, q, q, attn_mask=captured))(tj.randn(2, 3, 4))


def test_encoder_padded_positions_keep_their_values_under_no_grad():
    # torch's eval-mode fast path (nested tensors) returns zeros at padded positions under
    # no_grad; tapejit computes the layers there as torch does with grad enabled
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1).eval()
    ours = tj.nn.TransformerEncoder(tj.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1).eval()
    _load_torch_state(ours, theirs)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True
    with tj.no_grad():
        out = ours(tj.tensor(x), src_key_padding_mask=tj.tensor(padding))
    expected = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(padding))   # grad enabled: no fast path
    _close(out, expected, np.float32)


def test_functional_multi_head_attention_forward_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    module = torch.nn.MultiheadAttention(6, 2, kdim=4, vdim=5, add_bias_kv=True, dtype=torch.float64)
    params = {name: p.detach().numpy() for name, p in module.named_parameters()}
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, 2, 6)), rng.standard_normal((4, 2, 4)), rng.standard_normal((4, 2, 5))
    padding = np.array([[False, False, False, True], [False, False, False, False]])

    def run(lib, tensor, functional):
        p = {name: tensor(value) for name, value in params.items()}
        return functional.multi_head_attention_forward(
            tensor(q), tensor(k), tensor(v), 6, 2, None, p["in_proj_bias"], p["bias_k"], p["bias_v"], False, 0.0,
            p["out_proj.weight"], p["out_proj.bias"], training=False, key_padding_mask=tensor(padding),
            use_separate_proj_weight=True, q_proj_weight=p["q_proj_weight"], k_proj_weight=p["k_proj_weight"],
            v_proj_weight=p["v_proj_weight"], average_attn_weights=False)

    out, weights = run(tj, tj.tensor, F)
    expected, expected_weights = run(torch, torch.tensor, torch.nn.functional)
    _close(out, expected)
    _close(weights, expected_weights)
