"""L-BFGS, as torch.optim.LBFGS: torch's algorithm and strong-Wolfe line search, ported
operation for operation to NumPy, so the iterates are torch's to rounding.

torch mixes Python floats and 0-d tensors in the line search (a step length is sometimes
one, sometimes the other), and the dtype a value is rounded to follows from which it is.
Here a 0-d tensor is a NumPy scalar of the parameters' dtype: under NumPy's promotion rules
a Python float meets it as torch's does (the scalar's dtype wins), so float32 parameters
get torch's float32 arithmetic.  torch evaluates ``c / tensor`` as ``tensor.reciprocal() * c``
(``_rdiv``).  Between steps the state holds tapejit tensors in torch's layout.
"""
import numpy as np

from tapejit.creation import as_tensor as _as_tensor
from tapejit.creation import tensor as _new_tensor
from tapejit.optim.optimizer import Optimizer
from tapejit.tensor import Tensor

__all__ = ["LBFGS"]


def _rdiv(numerator, denominator):
    """``numerator / denominator`` as torch computes it when the denominator is a tensor."""
    if isinstance(denominator, np.generic):
        return np.reciprocal(denominator) * numerator
    return numerator / denominator


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    # torch's port of https://github.com/torch/optim/blob/master/polyinterp.lua
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    # the minimiser of the cubic through both points with their derivatives
    d1 = g1 + g2 - _rdiv(3 * (f1 - f2), x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    # torch's port of https://github.com/torch/optim/blob/master/lswolfe.lua
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = g_new.dot(d)

    # bracket an interval containing a point satisfying the Wolfe criteria
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket = [t_prev, t]
            bracket_f = [f_prev, f_new]
            bracket_g = [g_prev, g_new.copy()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket = [t]
            bracket_f = [f_new]
            bracket_g = [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket = [t_prev, t]
            bracket_f = [f_prev, f_new]
            bracket_g = [g_prev, g_new.copy()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        # interpolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        # next step
        t_prev = tmp
        f_prev = f_new
        g_prev = g_new.copy()
        gtd_prev = gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1

    # reached max number of iterations?
    if ls_iter == max_ls:
        bracket = [0, t]
        bracket_f = [f, f_new]
        bracket_g = [g, g_new]

    # zoom phase: refine the bracket until a point satisfies the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        # line-search bracket is so small
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # A trial point too close to an end of the bracket (twice in a row, or at or past
        # it) moves to 0.1 of the bracket's length from the nearer end.
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1

        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            # Armijo condition not satisfied or not lower than lowest point
            bracket[high_pos] = t
            bracket_f[high_pos] = f_new
            bracket_g[high_pos] = g_new.copy()
            bracket_gtd[high_pos] = gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True   # Wolfe conditions satisfied
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                # old high becomes new low
                bracket[high_pos] = bracket[low_pos]
                bracket_f[high_pos] = bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            # new point becomes new low
            bracket[low_pos] = t
            bracket_f[low_pos] = f_new
            bracket_g[low_pos] = g_new.copy()
            bracket_gtd[low_pos] = gtd_new

    t = bracket[low_pos]
    f_new = bracket_f[low_pos]
    g_new = bracket_g[low_pos]
    return f_new, g_new, t, ls_func_evals


def _numpy(value):
    """A state entry as the NumPy value the algorithm works on (0-d: a NumPy scalar)."""
    if isinstance(value, Tensor):
        array = value._value()
        return array[()] if array.ndim == 0 else array
    if isinstance(value, list):
        return [_numpy(v) for v in value]
    return value


def _tensor(value):
    """A NumPy value as the state's tapejit tensor (sharing an array's memory)."""
    if isinstance(value, np.ndarray):
        return _as_tensor(value)
    if isinstance(value, np.generic):
        return _new_tensor(np.asarray(value))
    if isinstance(value, list):
        return [_tensor(v) for v in value]
    return value


class LBFGS(Optimizer):
    """L-BFGS with torch.optim.LBFGS's arguments, defaults, state and iterates.

    ``step(closure)`` runs up to ``max_iter`` iterations (``max_eval`` closure calls), each
    a two-loop recursion over the last ``history_size`` curvature pairs, then a fixed step
    of ``lr`` or torch's strong-Wolfe line search (``line_search_fn="strong_wolfe"``).  One
    parameter group only; the state is kept under the first parameter, as torch does.
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                    "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                    "history_size": history_size, "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def __setstate__(self, state):
        super().__setstate__(state)
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def _numel(self):
        if self._numel_cache is None:
            self._numel_cache = sum(p.numel() for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self):
        views = []
        for p in self._params:
            grad = p._grad
            if grad is None:
                views.append(np.zeros(p.numel(), p._dtype.np))
            else:
                views.append((grad._data if grad._tape is None else grad._value()).reshape(-1))
        return np.concatenate(views)

    def _add_grad(self, step_size, update):
        offset = 0
        for p in self._params:
            param = self._param_array(p)
            numel = param.size
            param += step_size * update[offset:offset + numel].reshape(param.shape)
            offset += numel
        if offset != self._numel():
            raise AssertionError(f"Expected offset {offset} to equal {self._numel()}")

    def _clone_param(self):
        return [p._data.copy() for p in self._params]

    def _set_param(self, params_data):
        for p, data in zip(self._params, params_data):
            self._param_array(p)[...] = data

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(self._evaluate(closure))
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure):
        """Run the iterations; ``closure`` zeroes the gradients, computes the loss, calls
        ``backward()`` and returns the loss.  Returns the closure's first loss."""
        if len(self.param_groups) != 1:
            raise AssertionError(f"Expected exactly one param_group, but got {len(self.param_groups)}")
        with np.errstate(all="ignore"):   # torch's inf and nan, without NumPy's warnings
            return self._run(closure)

    def _run(self, closure):
        group = self.param_groups[0]
        lr = group["lr"]
        if isinstance(lr, Tensor):
            lr = float(lr)
        max_iter = group["max_iter"]
        max_eval = group["max_eval"]
        tolerance_grad = group["tolerance_grad"]
        tolerance_change = group["tolerance_change"]
        line_search_fn = group["line_search_fn"]
        history_size = group["history_size"]

        # LBFGS has only global state, kept under the first parameter as torch does (so
        # load_state_dict casts it like a parameter's)
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = self._evaluate(closure)
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1

        flat_grad = self._gather_flat_grad()
        opt_cond = np.abs(flat_grad).max() <= tolerance_grad
        if opt_cond:
            return orig_loss

        d = _numpy(state.get("d"))
        t = _numpy(state.get("t"))
        old_dirs = _numpy(state.get("old_dirs"))
        old_stps = _numpy(state.get("old_stps"))
        ro = _numpy(state.get("ro"))
        H_diag = _numpy(state.get("H_diag"))  # noqa: N806 (torch's name)
        prev_flat_grad = _numpy(state.get("prev_flat_grad"))
        prev_loss = state.get("prev_loss")
        al = None

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # ---- descent direction
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs = []
                old_stps = []
                ro = []
                H_diag = 1  # noqa: N806
            else:
                # update the memory with the last step's curvature pair
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(_rdiv(1.0, ys))
                    H_diag = ys / y.dot(y)  # noqa: N806

                # two-loop recursion: the inverse Hessian estimate times the gradient
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [None] * history_size
                if al is None:
                    al = _numpy(state["al"])
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q += -al[i] * old_dirs[i]
                d = r = q * H_diag
                for i in range(num_old):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]

            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.copy()
            else:
                prev_flat_grad[...] = flat_grad
            prev_loss = loss

            # ---- step length
            if state["n_iter"] == 1:
                t = min(1.0, _rdiv(1.0, np.abs(flat_grad).sum())) * lr
            else:
                t = lr

            gtd = flat_grad.dot(d)   # directional derivative
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd,
                    max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                # a fixed step; the function is evaluated again unless this is the last
                # iteration (in a stochastic setting that evaluation would be wasted)
                self._add_grad(t, d)
                if n_iter != max_iter:
                    loss = float(self._evaluate(closure))
                    flat_grad = self._gather_flat_grad()
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1

            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            # ---- stopping conditions
            if n_iter == max_iter:
                break
            if current_evals >= max_eval:
                break
            if opt_cond:
                break
            if np.abs(d * t).max() <= tolerance_change:   # lack of progress
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        if al is not None:
            state["al"] = _tensor(al)
        state["d"] = _tensor(d)
        state["t"] = _tensor(t)
        state["old_dirs"] = _tensor(old_dirs)
        state["old_stps"] = _tensor(old_stps)
        state["ro"] = _tensor(ro)
        state["H_diag"] = _tensor(H_diag)
        state["prev_flat_grad"] = _tensor(prev_flat_grad)
        state["prev_loss"] = prev_loss
        return orig_loss
