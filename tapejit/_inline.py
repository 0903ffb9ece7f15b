"""Inline a scalar rule's body into generated source.

Numba compiles every called function through its whole pipeline, and that fixed cost,
paid for some hundred small rules, dominated cold start-up.  The generator therefore
copies each rule's body into the sweep as plain statements: parameters become
assignments, locals get a per-op prefix (Numba needs one type per variable name), and
``return`` becomes an assignment to the result inside an if/else ladder.  The rules
stay ordinary compiled functions in their op modules, callable and testable alone.
"""
import ast
import inspect
import textwrap


def _has_return(stmts):
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


def _lower(stmts, result):
    """Rewrite ``stmts`` so that every ``return e`` becomes ``result = e`` and nothing after
    a return runs (the rest of a block is copied into each branch that falls through)."""
    out = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            if s.value is not None and result is not None:
                out.append(ast.Assign(targets=[ast.Name(result, ast.Store())], value=s.value, lineno=0))
            return out
        if isinstance(s, ast.If) and _has_return([s]):
            rest = stmts[i + 1:]
            body = _lower(s.body + rest, result)
            orelse = _lower(s.orelse + rest, result)
            out.append(ast.If(test=s.test, body=body or [ast.Pass()], orelse=orelse))
            return out
        if isinstance(s, (ast.For, ast.While)) and _has_return(s.body):
            raise ValueError("tapejit rules may not return from inside a loop")
        out.append(s)
    return out


def inline(fn, args, result, prefix):
    """Source lines computing ``result = fn(*args)`` with ``fn``'s body inlined."""
    src = textwrap.dedent(inspect.getsource(fn.py_func))
    fdef = ast.parse(src).body[0]
    params = [a.arg for a in fdef.args.args]
    if len(params) != len(args):
        raise TypeError(f"{fdef.name} takes {len(params)} arguments, the generator passes {len(args)}")
    local = set(params) | {n.id for n in ast.walk(fdef)
                           if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in local:
                return ast.copy_location(ast.Name(prefix + node.id, node.ctx), node)
            return node

    body = [s for s in fdef.body
            if not (isinstance(s, ast.Expr) and isinstance(getattr(s, "value", None), ast.Constant))]
    body = [Rename().visit(s) for s in body]
    ret = prefix + "result" if result is not None else None
    lowered = _lower(body, ret) or [ast.Pass()]
    module = ast.Module(body=lowered, type_ignores=[])
    ast.fix_missing_locations(module)
    lines = [f"{prefix}{p} = {a}" if p != a else f"{prefix}{p} = {a}" for p, a in zip(params, args)]
    lines += ast.unparse(module).splitlines()
    if result is not None:
        lines.append(f"{result} = {ret}")
    return lines


def reads(fn):
    """Positions of the parameters ``fn``'s body reads (a rule that ignores its output
    value lets a chunked run keep that value in cache only; see ``tapejit/executor.py``)."""
    fdef = ast.parse(textwrap.dedent(inspect.getsource(fn.py_func))).body[0]
    params = [a.arg for a in fdef.args.args]
    used = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return {i for i, p in enumerate(params) if p in used}
