"""Input domains and shape sets that ops bring for their gradient tests.

An op's ``samples(rng)`` returns ``[(label, fn, inputs)]``: ``fn(tj, *tensors)`` calls the
op through the public API and ``inputs`` are float64 NumPy arrays inside the op's domain.
The tests run each case through finite differences, float32, and PyTorch when present.
"""
import numpy as np

UNARY_SHAPES = [(), (5,), (3, 4), (2, 3, 2)]
BINARY_SHAPES = [((), ()), ((5,), (5,)), ((3, 4), (3, 4)), ((3, 4), (4,)),
                 ((3, 1), (1, 4)), ((2, 3, 2), (3, 1)), ((), (3,)), ((4,), ())]


def anywhere(rng, shape):
    return rng.uniform(-2.0, 2.0, size=shape)


def bounded(rng, shape):
    return rng.uniform(-1.2, 1.2, size=shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, size=shape)


def away_from_zero(rng, shape):
    """Values at least 0.2 from 0 (and from each other's kinks) so differences stay smooth."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.2, 2.0, size=shape)


def distinct(rng, shape):
    """Values with no ties, for max/min/sort-like ops whose derivative jumps at ties."""
    n = int(np.prod(shape, dtype=np.int64))
    return (rng.permutation(n).reshape(shape) * 0.37 - n * 0.15 + rng.uniform(-0.05, 0.05, size=shape))


def unary_samples(name, domain, fn=None, shapes=UNARY_SHAPES):
    call = fn or (lambda tj, x: getattr(tj, name)(x))

    def samples(rng):
        return [(f"{name}{list(s)}", call, [domain(rng, s)]) for s in shapes]
    return samples


def binary_samples(name, domain_x, domain_y=None, fn=None, shapes=BINARY_SHAPES):
    call = fn or (lambda tj, x, y: getattr(tj, name)(x, y))
    domain_y = domain_y or domain_x

    def samples(rng):
        return [(f"{name}{list(sx)}x{list(sy)}", call, [domain_x(rng, sx), domain_y(rng, sy)])
                for sx, sy in shapes]
    return samples


def cases(*items):
    """Explicit cases: ``(label, fn, [shape_or_array, ...], domain)`` tuples."""
    def samples(rng):
        out = []
        for label, fn, specs, domain in items:
            inputs = [domain(rng, s) if isinstance(s, tuple) else np.asarray(s) for s in specs]
            out.append((label, fn, inputs))
        return out
    return samples
