"""numba, or plain Python where it is missing; the tolerances and bit helpers every kernel shares."""

from __future__ import annotations

import numpy as np

try:  # numba is what makes this fast; the code is also valid plain Python.
    import numba
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None
    HAVE_NUMBA = False
    prange = range

    def njit(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn


JIT = HAVE_NUMBA and not numba.config.DISABLE_JIT


def _tz_py(x):
    """Index of the lowest set bit of a nonzero uint64 (plain Python)."""
    x = int(x)
    return (x & -x).bit_length() - 1


if JIT:
    from numba.cpython.unsafe.numbers import trailing_zeros as _trailing_zeros

    @njit(cache=True)
    def _tz(x):  # pragma: no cover - compiled
        """Index of the lowest set bit of a nonzero uint64."""
        return np.int64(_trailing_zeros(x))

else:  # pragma: no cover - plain Python
    _tz = _tz_py

# An arc whose residual capacity is at most this is treated as saturated; excess at most this as zero.
RESIDUAL_EPS = 1e-13
# Stop as soon as the sink holds the trivial upper bound U minus this (the value cannot exceed U).
STOP_TOL = 1e-12


_ONE = np.uint64(1)
_ZERO = np.uint64(0)
# positions in the workspace tuple (see _workspace)
(
    _WF,
    _WDOWN,
    _WDOWNT,
    _WUP,
    _WUPT,
    _WE,
    _WG,
    _WD,
    _WLAB,
    _WCNT,
    _WBHEAD,
    _WBNEXT,
    _WQUEUE,
    _WUNSEEN,
    _WTOUCHED,
    _WLAY,
    _WPOS,
    _WRHO,
    _WKIDS,
    _WSEND,
    _WNXT,
) = range(21)


@njit(cache=True)
def _bit(i):  # pragma: no cover - compiled
    return _ONE << np.uint64(i & 63)


def seal_cache(modules) -> None:
    """Key every kernel's on-disk cache on the source of all `modules` together.

    numba checks a cached kernel against its own file only, so a kernel would keep calling the old
    code of a callee edited in another file. One stamp (a hash of all the kernels' sources) for all
    of them makes any edit recompile every kernel, as it did when they shared one file.
    """
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in modules)).hexdigest()
    for mod in modules:
        for value in vars(mod).values():
            cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
            if hasattr(cache_file, "_source_stamp"):
                cache_file._source_stamp = digest
