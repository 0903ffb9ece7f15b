"""Where op modules publish their front-end functions.

An op module defines ``tj.exp`` next to its rules and calls ``export(exp, method=True)``;
``install()`` then puts it in the ``tapejit`` namespace and on ``Tensor``, so adding an
op touches one file.
"""
EXPORTS = []   # (name, fn, method_name_or_None, dunders)


def export(fn=None, *, name=None, method=False, dunders=(), function=True):
    def register(f):
        public = name or f.__name__
        meth = public if method is True else (method or None)
        EXPORTS.append((public if function else None, f, meth, tuple(dunders)))
        return f
    return register(fn) if fn is not None else register


def install(namespace, tensor_cls):
    for public, fn, meth, dunders in EXPORTS:
        if public is not None:
            namespace.setdefault(public, fn)
        if meth is not None:
            setattr(tensor_cls, meth, fn)
        for d in dunders:
            setattr(tensor_cls, d, fn)
