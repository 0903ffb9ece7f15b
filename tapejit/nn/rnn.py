"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, as torch's modules, and the
functions behind them with torch's names and signatures (``tj.lstm``, ``tj.gru``,
``tj.rnn_tanh``, ``tj.rnn_relu``, ``tj.lstm_cell``, ``tj.gru_cell``, ``tj.rnn_tanh_cell``,
``tj.rnn_relu_cell``).

Each layer and direction is one ``linear`` record (the input projection of every step)
and one layer record (the recurrence, tapejit/ops/rnn.py); ``h_n`` is the output's last
row for each layer and direction, stacked; ``c_n`` comes from the layer records.
"""
import math
import numbers
import warnings
from collections import namedtuple

import numpy as np

from tapejit import dtypes
from tapejit.api import export
from tapejit.creation import empty
from tapejit.nn import init
from tapejit.nn.module import Module
from tapejit.nn.parameter import Parameter
from tapejit.ops import rnn as _rnn
from tapejit.ops.linalg import LINEAR_NO_BIAS
from tapejit.ops.join import cat, stack
from tapejit.recording import eager, on_tape, record
from tapejit.shapes import numel
from tapejit.tape import current, state
from tapejit.tensor import Tensor, _concrete

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
#: torch.nn.utils.rnn's names, defined at the end of this module (tapejit.nn.utils.rnn)
SEQUENCE_UTILITIES = ("PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
                      "unpad_sequence", "pack_sequence", "unpack_sequence")

_MODES = {"LSTM": _rnn.LSTM_MODE, "GRU": _rnn.GRU_MODE, "RNN_TANH": _rnn.TANH_MODE,
          "RNN_RELU": _rnn.RELU_MODE}
_CELL_OPS = {_rnn.LSTM_MODE: _rnn.LSTM_CELL, _rnn.GRU_MODE: _rnn.GRU_CELL,
             _rnn.TANH_MODE: _rnn.RNN_TANH_CELL, _rnn.RELU_MODE: _rnn.RNN_RELU_CELL}


# ---- the functions --------------------------------------------------------------------------

def _project(x, weight):
    """``x @ weight.T`` over every row of ``x`` (any number of leading dims) as one ``linear``
    record of shape ``(rows, gates)``: the layer reads it by row, so the sequence dims need
    no reshape record.  The bias is added by the layer (its gradient there is the same row
    sums as ``b_hh``'s)."""
    if not on_tape(x, weight):
        return eager(_project, x, weight)
    rows, k, n = numel(x._shape[:-1]), x._shape[-1], weight._shape[0]
    tape = state.tape or current()
    p = tape.add_ints((rows, k, n, 0, -1))
    return record(LINEAR_NO_BIAS, (x, weight), (rows, n), x._dtype, p, 0)


def _outputs_without_grad(fn, *args):
    """``fn(*args)``'s tuple of tensors when nothing needs a gradient: recorded, computed
    and dropped at once as one result (``recording.eager`` returns one tensor)."""
    shapes = []

    def joined(*a):
        outs = fn(*a)
        outs = outs if isinstance(outs, tuple) else (outs,)
        shapes.extend(o._shape for o in outs)
        return cat([o.reshape(-1) for o in outs])
    flat = eager(joined, *args)._value()
    result, start = [], 0
    for shape in shapes:
        n = numel(shape)
        result.append(_concrete(flat[start:start + n].reshape(shape).copy()))
        start += n
    return tuple(result)


def _tensors(*groups):
    out = []
    for g in groups:
        if isinstance(g, Tensor):
            out.append(g)
        elif g is not None:
            out.extend(t for t in g if t is not None)
    return out


def _same_dtype(tensors, what):
    dt = tensors[0]._dtype
    for t in tensors[1:]:
        if t._dtype is not dt:
            raise RuntimeError(f"{what}: expected every tensor to have dtype {dt}, but got {t._dtype} "
                               f"and {dt} (torch: mat1 and mat2 must have the same dtype)")
    if not dt.is_floating_point:
        raise RuntimeError(f"{what}: expected floating point tensors, got {dt}")


def _run(mode, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
         batch_sizes=None):
    """The layers; with ``batch_sizes`` (packed sequences) ``input`` is the packed data,
    ``(sum(batch_sizes), features)``, and so is the output."""
    name = {0: "lstm", 1: "gru", 2: "rnn_tanh", 3: "rnn_relu"}[mode]
    if mode == _rnn.LSTM_MODE:
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise RuntimeError(f"{name}: hx must be a pair of tensors (h_0, c_0)")
        h_all, c_all = hx
    else:
        h_all, c_all = hx, None
    params = list(params)
    everything = _tensors(input, h_all, c_all, params)
    if not on_tape(*everything):
        return _outputs_without_grad(_run, mode, input, hx, params, has_biases, num_layers, dropout, train,
                                     bidirectional, batch_first, batch_sizes)
    _same_dtype(everything, name)
    if input.dim() != (2 if batch_sizes is not None else 3):
        raise RuntimeError(f"{name}: expected a {'2-D packed' if batch_sizes is not None else '3-D'} input, "
                           f"got {input.dim()}-D")
    directions = 2 if bidirectional else 1
    proj = mode == _rnn.LSTM_MODE and h_all._shape[-1] != c_all._shape[-1]
    per_layer = 2 + (2 if has_biases else 0) + (1 if proj else 0)
    if len(params) != per_layer * num_layers * directions:
        raise RuntimeError(f"{name}: got an incorrect number of RNN parameters: {len(params)} for "
                           f"{num_layers} layer(s), {directions} direction(s) and "
                           f"{per_layer} parameters each")
    if batch_sizes is not None:
        x = input
        T, B = len(batch_sizes), int(batch_sizes[0]) if len(batch_sizes) else 0
        # the rows of the packed output: step t holds the first batch_sizes[t] sequences
        steps = np.repeat(np.arange(T), batch_sizes)
        rows = np.concatenate([np.arange(n) for n in batch_sizes]) if T else np.zeros(0, np.int64)
    else:
        x = input.transpose(0, 1) if batch_first else input
        T, B = x._shape[0], x._shape[1]
    if T == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    gates = _rnn.GATES[mode]
    final_h, final_c = [], []
    layer_input = x
    for layer in range(num_layers):
        outs = []
        for direction in range(directions):
            k = layer * directions + direction
            w = params[k * per_layer:(k + 1) * per_layer]
            w_ih, w_hh = w[0], w[1]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            w_hr = w[-1] if proj else None
            H = w_hh._shape[0] // gates
            P = w_hh._shape[1]
            if w_ih._shape != (gates * H, layer_input._shape[-1]):
                raise RuntimeError(f"{name}: weight_ih of layer {layer} has shape {list(w_ih._shape)}, expected "
                                   f"{[gates * H, layer_input._shape[-1]]}")
            for label, state_all, size in (("hx", h_all, P), ("cx", c_all, H)):
                if state_all is not None and tuple(state_all._shape) != (num_layers * directions, B, size):
                    raise RuntimeError(f"{name}: {label} has shape {list(state_all._shape)}, expected "
                                       f"{[num_layers * directions, B, size]}")
            reverse = direction == 1
            xw = _project(layer_input, w_ih)
            h0 = h_all[k]
            c0 = c_all[k] if c_all is not None else None
            out = _rnn.record_layer(_rnn.RNN_LAYER, mode, xw, w_hh, h0, c0, b_ih, b_hh, w_hr, T, B, H, P,
                                    reverse, (T, B, P), batch_sizes)
            outs.append(out if batch_sizes is None else out[steps, rows])
            final_h.append(out[0] if reverse else out[T - 1])
            if mode == _rnn.LSTM_MODE:
                region = _rnn.layer_region(mode, T, B, H, P, proj)
                final_c.append(_rnn.final_cell_state(out, region, T, B, H, reverse))
        layer_input = outs[0] if directions == 1 else cat(outs, -1)
        if dropout > 0 and train and layer < num_layers - 1:
            from tapejit.nn.functional import dropout as _dropout
            layer_input = _dropout(layer_input, dropout, True)
    output = layer_input.transpose(0, 1) if batch_first and batch_sizes is None else layer_input
    if mode == _rnn.LSTM_MODE:
        return output, stack(final_h), stack(final_c)
    return output, stack(final_h)


@export()
def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.lstm: ``(output, h_n, c_n)`` of a multi-layer LSTM with flat ``params``
    (per layer and direction: w_ih, w_hh[, b_ih, b_hh][, w_hr])."""
    return _run(_rnn.LSTM_MODE, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                batch_first)


@export()
def gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.gru: ``(output, h_n)``."""
    return _run(_rnn.GRU_MODE, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                batch_first)


@export()
def rnn_tanh(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.rnn_tanh: ``(output, h_n)`` of an Elman RNN with tanh."""
    return _run(_rnn.TANH_MODE, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                batch_first)


@export()
def rnn_relu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.rnn_relu: ``(output, h_n)`` of an Elman RNN with ReLU."""
    return _run(_rnn.RELU_MODE, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                batch_first)


def _cell(mode, input, hx, w_ih, w_hh, b_ih, b_hh):
    h0, c0 = (hx[0], hx[1]) if mode == _rnn.LSTM_MODE else (hx, None)
    everything = _tensors(input, h0, c0, (w_ih, w_hh, b_ih, b_hh))
    if not on_tape(*everything):
        results = _outputs_without_grad(_cell, mode, input, hx, w_ih, w_hh, b_ih, b_hh)
        return results if mode == _rnn.LSTM_MODE else results[0]
    name = {0: "lstm_cell", 1: "gru_cell", 2: "rnn_tanh_cell", 3: "rnn_relu_cell"}[mode]
    _same_dtype(everything, name)
    gates = _rnn.GATES[mode]
    if input.dim() != 2:
        raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got 1) "
                         f"({name}: expected a 2-D input, got {input.dim()}-D)")
    H = w_hh._shape[1]
    if input._shape[1] != w_ih._shape[1]:
        raise RuntimeError(f"input has inconsistent input_size: got {input._shape[1]} expected {w_ih._shape[1]}")
    if w_ih._shape[0] != gates * H or w_hh._shape[0] != gates * H:
        which, got = ("weight_ih", w_ih) if w_ih._shape[0] != gates * H else ("weight_hh", w_hh)
        raise RuntimeError(f"{which} first dim must be {gates} * hidden_size = {gates * H}, but got "
                           f"{got._shape[0]}")
    B = input._shape[0]
    for label, t in ((0, h0), (1, c0)):
        if t is None:
            continue
        if t.dim() < 2:
            raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got 1) "
                             f"({name}: expected a 2-D hidden state, got {t.dim()}-D)")
        if t._shape[0] != B:
            raise RuntimeError(f"Input batch size {B} doesn't match hidden{label} batch size {t._shape[0]}")
        if t._shape[1] != H:
            raise RuntimeError(f"hidden{label} has inconsistent hidden_size: got {t._shape[1]}, expected {H}")
        if t.dim() != 2:
            raise RuntimeError(f"{name}: expected a 2-D hidden state, got {t.dim()}-D {list(t._shape)}")
    xw = _project(input, w_ih)
    h = _rnn.record_layer(_CELL_OPS[mode], mode, xw, w_hh, h0, c0, b_ih, b_hh, None, 1, B, H, H, False, (B, H))
    if mode != _rnn.LSTM_MODE:
        return h
    c = _rnn.final_cell_state(h, _rnn.layer_region(mode, 1, B, H, H, False), 1, B, H, False)
    return h, c


@export()
def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.lstm_cell: one LSTM step, ``(h_1, c_1)``; ``hx`` is ``(h_0, c_0)``."""
    return _cell(_rnn.LSTM_MODE, input, hx, w_ih, w_hh, b_ih, b_hh)


@export()
def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.gru_cell: one GRU step, ``h_1``."""
    return _cell(_rnn.GRU_MODE, input, hx, w_ih, w_hh, b_ih, b_hh)


@export()
def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_tanh_cell: ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return _cell(_rnn.TANH_MODE, input, hx, w_ih, w_hh, b_ih, b_hh)


@export()
def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_relu_cell: ``relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return _cell(_rnn.RELU_MODE, input, hx, w_ih, w_hh, b_ih, b_hh)


# ---- the modules ----------------------------------------------------------------------------

def _zeros(shape, like):
    return _concrete(np.zeros(shape, like._dtype.np))


class RNNBase(Module):
    """What ``RNN``, ``LSTM`` and ``GRU`` share: torch's parameters (names, shapes, order and
    initialisation ``uniform(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``), checks and repr."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        if (not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1
                or isinstance(dropout, bool)):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of "
                             "an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero "
                          "dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: {type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: {type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _MODES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        gate_size = _rnn.GATES[_MODES[mode]] * hidden_size
        dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()
        self._flat_weights_names = []
        self._all_weights = []
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input_size = input_size if layer == 0 else real_hidden_size * num_directions
                shapes = [(gate_size, layer_input_size), (gate_size, real_hidden_size)]
                names = ["weight_ih_l{}{}", "weight_hh_l{}{}"]
                if bias:
                    shapes += [(gate_size,), (gate_size,)]
                    names += ["bias_ih_l{}{}", "bias_hh_l{}{}"]
                if proj_size > 0:
                    shapes.append((proj_size, hidden_size))
                    names.append("weight_hr_l{}{}")
                suffix = "_reverse" if direction == 1 else ""
                names = [n.format(layer, suffix) for n in names]
                for n, shape in zip(names, shapes):
                    setattr(self, n, Parameter(empty(shape, dtype=dt)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _flat_weights(self):
        return [getattr(self, n, None) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self):
        """A no-op, as torch's on the CPU (it packs weights for cuDNN)."""

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def check_input(self, input, batch_sizes):
        weight_dtype = self._flat_weights[0].dtype
        if input.dtype != weight_dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight_dtype}). "
                             f"Convert input: input.to({weight_dtype}), or convert model: model.to({input.dtype})")
        expected_input_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_input_dim:
            raise RuntimeError(f"input must have {expected_input_dim} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.size(-1)}")

    def _mini_batch(self, input, batch_sizes):
        if batch_sizes is not None:
            return int(batch_sizes[0])
        return input.size(0) if self.batch_first else input.size(1)

    def get_expected_hidden_size(self, input, batch_sizes):
        mini_batch = self._mini_batch(input, batch_sizes)
        num_directions = 2 if self.bidirectional else 1
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * num_directions, mini_batch, size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        if tuple(hx.size()) != expected_hidden_size:
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def _initial(self, input, size, batch_sizes=None):
        num_directions = 2 if self.bidirectional else 1
        return _zeros((self.num_layers * num_directions, self._mini_batch(input, batch_sizes), size), input)

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return hx.index_select(1, permutation)

    def _packed(self, input, hx, sizes):
        """torch's forward of a PackedSequence: states in the packed (sorted) batch order."""
        data, batch_sizes, sorted_indices, unsorted_indices = input
        counts = [int(n) for n in batch_sizes.tolist()]
        if hx is None:
            hx = tuple(self._initial(data, size, counts) for size in sizes)
            hx = hx if len(sizes) == 2 else hx[0]
        else:
            hx = self.permute_hidden(hx, sorted_indices)
        self.check_forward_args(data, hx, counts)
        result = _run(_MODES[self.mode], data, hx, self._flat_weights, self.bias, self.num_layers, self.dropout,
                      self.training, self.bidirectional, False, counts)
        output = PackedSequence(result[0], batch_sizes, sorted_indices, unsorted_indices)
        hidden = result[1] if len(result) == 2 else (result[1], result[2])
        return output, self.permute_hidden(hidden, unsorted_indices)

    def _single(self, input, hx, name):
        """torch's handling of one hidden-state tensor for RNN and GRU: unbatched input, checks."""
        if isinstance(input, PackedSequence):
            return self._packed(input, hx, (self.hidden_size,))
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D "
                             f"{'tensor ' if name == 'RNN' else ''}instead")
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        elif hx is not None and hx.dim() != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor")
        if hx is None:
            hx = self._initial(input, self.hidden_size)
        self.check_forward_args(input, hx, None)
        output, hidden = _run(_MODES[self.mode], input, hx, self._flat_weights, self.bias, self.num_layers,
                              self.dropout, self.training, self.bidirectional, self.batch_first)
        if not is_batched:
            output = output.squeeze(batch_dim)
            hidden = hidden.squeeze(1)
        return output, hidden

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def forward(self, input, hx=None):
        return self._single(input, hx, "RNN")


class LSTM(RNNBase):
    """Long short-term memory, gates i, f, g, o as torch; ``proj_size`` projects ``h``."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return hx[0].index_select(1, permutation), hx[1].index_select(1, permutation)

    def get_expected_cell_size(self, input, batch_sizes):
        mini_batch = self._mini_batch(input, batch_sizes)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def forward(self, input, hx=None):
        real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        if isinstance(input, PackedSequence):
            return self._packed(input, hx, (real_hidden_size, self.hidden_size))
        if input.dim() not in (2, 3):
            raise ValueError(f"LSTM: Expected input to be 2D or 3D, got {input.dim()}D instead")
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
        if hx is None:
            hx = (self._initial(input, real_hidden_size), self._initial(input, self.hidden_size))
        else:
            if is_batched:
                if hx[0].dim() != 3 or hx[1].dim() != 3:
                    raise RuntimeError("For batched 3-D input, hx and cx should also be 3-D but got "
                                       f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
            else:
                if hx[0].dim() != 2 or hx[1].dim() != 2:
                    raise RuntimeError("For unbatched 2-D input, hx and cx should also be 2-D but got "
                                       f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx, None)
        output, h_n, c_n = _run(_rnn.LSTM_MODE, input, hx, self._flat_weights, self.bias, self.num_layers,
                                self.dropout, self.training, self.bidirectional, self.batch_first)
        if not is_batched:
            return output.squeeze(batch_dim), (h_n.squeeze(1), c_n.squeeze(1))
        return output, (h_n, c_n)


class GRU(RNNBase):
    """Gated recurrent unit, gates r, z, n as torch: ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
    ``h' = (1 - z) * n + z * h``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        return self._single(input, hx, "GRU")


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()
        self.weight_ih = Parameter(empty((num_chunks * hidden_size, input_size), dtype=dt))
        self.weight_hh = Parameter(empty((num_chunks * hidden_size, hidden_size), dtype=dt))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, dtype=dt))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, dtype=dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _batched(self, input, hx, name, states):
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if hx is not None:
            for idx, value in enumerate(hx if states == 2 else (hx,)):
                if value.dim() not in (1, 2):
                    what = f"hx[{idx}]" if states == 2 else "hidden"
                    raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {value.dim()}D instead")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            zeros = _zeros((input.size(0), self.hidden_size), input)
            hx = (zeros, zeros) if states == 2 else zeros
        elif not is_batched:
            hx = tuple(h.unsqueeze(0) for h in hx) if states == 2 else hx.unsqueeze(0)
        return input, hx, is_batched


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, hx, "RNNCell", 1)
        if self.nonlinearity == "tanh":
            ret = rnn_tanh_cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        elif self.nonlinearity == "relu":
            ret = rnn_relu_cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return ret if is_batched else ret.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, hx, "LSTMCell", 2)
        h, c = lstm_cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h, c) if is_batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, hx, "GRUCell", 1)
        ret = gru_cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return ret if is_batched else ret.squeeze(0)


# ---- torch.nn.utils.rnn: packed and padded sequences ----------------------------------------

_PackedSequenceBase = namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


def _invert_permutation(permutation):
    if permutation is None:
        return None
    order = np.asarray(permutation._value(), np.int64)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return _concrete(inverse)


class PackedSequence(_PackedSequenceBase):
    """A batch of sequences of different lengths, packed time step by time step: ``data``
    holds, for each step ``t``, the ``batch_sizes[t]`` sequences still running (sorted by
    decreasing length, ``sorted_indices`` giving the original order)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = _invert_permutation(sorted_indices)
        if batch_sizes is None:
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self):
        return self

    def double(self):
        return self.to(dtypes.float64)

    def float(self):
        return self.to(dtypes.float32)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _lengths(lengths):
    if isinstance(lengths, Tensor):
        return np.asarray(lengths._value(), np.int64).reshape(-1)
    return np.asarray(lengths, np.int64).reshape(-1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded ``(T, B, *)`` batch (``(B, T, *)`` with ``batch_first``) of sequences of
    ``lengths`` (decreasing, unless ``enforce_sorted=False``)."""
    lengths = _lengths(lengths)
    if enforce_sorted:
        if np.any(lengths[:-1] < lengths[1:]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
    else:
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        sorted_indices = _concrete(order.astype(np.int64))
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if lengths.size and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    if lengths.size and lengths[0] > input.shape[0]:
        raise RuntimeError(f"pack_padded_sequence: a length of {lengths[0]} is longer than the input's "
                           f"{input.shape[0]} steps")
    steps = int(lengths[0]) if lengths.size else 0
    batch_sizes = np.array([(lengths > t).sum() for t in range(steps)], np.int64)
    ts = np.repeat(np.arange(steps), batch_sizes)
    bs = np.concatenate([np.arange(n) for n in batch_sizes]) if steps else np.zeros(0, np.int64)
    return PackedSequence(input[ts, bs], _concrete(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of ``pack_padded_sequence``: ``(padded, lengths)``, padded with
    ``padding_value`` to the longest sequence (or ``total_length``) in the original order."""
    data, batch_sizes = sequence.data, np.asarray(sequence.batch_sizes._value(), np.int64)
    steps, batch = len(batch_sizes), int(batch_sizes[0]) if len(batch_sizes) else 0
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {steps}")
        steps_out = total_length
    else:
        steps_out = steps
    # position of each padded (t, b) among data's rows, or the padding row after them
    where = np.full((steps_out, batch), data.shape[0], np.int64)
    start = 0
    for t, n in enumerate(batch_sizes):
        where[t, :n] = np.arange(start, start + n)
        start += n
    lengths = (where[:steps] < data.shape[0]).sum(0).astype(np.int64)
    padding = _concrete(np.full((1,) + tuple(data.shape[1:]), padding_value, data.dtype.np))
    padded = cat([data, padding])[where]
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices._value(), np.int64)]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _concrete(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors of shapes ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` with
    ``batch_first``), padded with ``padding_value`` on the ``padding_side``."""
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0))
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    total = sum(s.shape[0] for s in sequences)
    where = np.full((longest, len(sequences)), total, np.int64)
    start = 0
    for b, s in enumerate(sequences):
        n = s.shape[0]
        t0 = 0 if padding_side == "right" else longest - n
        where[t0:t0 + n, b] = np.arange(start, start + n)
        start += n
    joined = cat(sequences)
    padding = _concrete(np.full((1,) + tuple(joined.shape[1:]), padding_value, joined.dtype.np))
    padded = cat([joined, padding])[where.T if batch_first else where]
    return padded


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences ``pad_sequence`` padded."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[b][:int(n)] for b, n in enumerate(_lengths(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """``pack_padded_sequence(pad_sequence(sequences), lengths)``."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences ``pack_sequence`` packed."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
