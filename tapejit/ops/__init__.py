"""Op definitions, one module per family.  Import order fixes the opcodes."""
from tapejit.ops import (  # noqa: F401
    core,
    unary,
    binary,
    movement,
    views,
    indexing,
    join,
    reduce,
    linalg,
    softmax,
    loss,
    conv,
    pool,
    norm,
    rnn,
)
from tapejit.ops import special, linalg_small, linalg_dense  # noqa: F401,E402
from tapejit.ops import indexed  # noqa: F401,E402
