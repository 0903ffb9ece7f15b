"""The demo's workloads, shared with the benchmarks so both measure the same graph."""


def scalar_graph(tl, F, n_ops, inputs=None):
    """A. Rogozhnikov's scalar graph ("Fastest Autograd in the West", 2023) in library ``tl``
    (tapejit or torch) with its functional module ``F``: 100 float64 inputs x_i = i/100,
    then softplus, 4-term sums, products and 4-way softmaxes.  Returns ``(inputs, output)``."""
    if inputs is None:
        inputs = [tl.tensor(i / 100, dtype=tl.float64, requires_grad=True) for i in range(100)]
    nodes = list(inputs)
    for k in range(n_ops):
        m = k % 4
        if m == 0:
            nodes.append(F.softplus(nodes[-10]))
        elif m == 1:
            nodes.append(sum(nodes[-30:-10:5]))
        elif m == 2:
            nodes.append(nodes[-20] * nodes[-10])
        else:
            nodes.extend(F.softmax(tl.stack(nodes[-4:]), dim=0))
    return inputs, nodes[-1]
