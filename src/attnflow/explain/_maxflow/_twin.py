"""Cold start: the kernels as plain Python while numba compiles them in a background process.

Compiling every kernel from an empty cache takes ~30 s (numba optimises each caller again with its
callees linked in); loading them from numba's on-disk cache takes ~0.3 s. So a call

1. uses its entry kernel if it is in memory;
2. otherwise, if the call is small (estimated work < TWIN_WORK), runs the "twins": the kernels'
   own Python source with each call to a kernel bound to that kernel's twin -- the same float64
   operations in the same order, so the same values, at ~1e5-1e6 arc visits per second. With
   nothing cached it also starts one background process that compiles every kernel into the
   cache (`warm_up`); with the kernels cached it keeps to the twins until their work in this
   process reaches LOAD_WORK, about what loading the cache costs (`use_twins`);
3. otherwise loads the kernels from the cache (numba keeps it next to the source, or in the
   user's cache folder when site-packages is read-only, or in NUMBA_CACHE_DIR), waits for the
   background compile, or compiles in-process.

ATTNFLOW_JIT=compile skips the twins (compile in-process, as numba does by default); =python always
uses them (slow; for tests); the default is "auto".
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from . import _greedy, _jit, _labels, _push_relabel, _residual, _solve, _tasks

MODES = ("auto", "compile", "python")
# Below this much estimated work (~ arc visits, see _plan) a call that finds no compiled kernel runs
# the Python twins (~1.2 us per unit: 0.1 s for one 20-token sentence from CLS, 6 layers; <= ~0.6 s).
TWIN_WORK = 5e5
_KERNEL_MODULES = (_jit, _residual, _labels, _push_relabel, _greedy, _solve, _tasks)
# A process runs the twins for small calls, with the kernels cached but not loaded, until their
# estimated work adds up to this (~0.3 s of Python, about one load of the cache; see `use_twins`).
LOAD_WORK = 2.5e5
_state: dict = {"twins": None, "ready": set(), "child": None, "twin_work": 0.0}


def jit_mode() -> str:
    mode = os.environ.get("ATTNFLOW_JIT", "auto")
    if mode not in MODES:
        raise ValueError(f"ATTNFLOW_JIT must be one of {MODES}, got {mode!r}")
    return mode


def twins() -> dict[str, types.FunctionType]:
    """Every kernel as a plain Python function, by name; kernels they call are twins too."""
    if _state["twins"] is None:
        dispatchers = {}
        for mod in _KERNEL_MODULES:
            for value in vars(mod).values():
                if hasattr(value, "py_func"):
                    dispatchers[id(value)] = value
        spaces = {mod.__name__: dict(vars(mod)) for mod in _KERNEL_MODULES}
        made = {}
        for key, disp in dispatchers.items():
            f = disp.py_func
            made[key] = types.FunctionType(f.__code__, spaces[f.__module__], f.__name__, f.__defaults__)
        made[id(_jit._tz)] = _jit._tz_py  # the compiled one calls an LLVM intrinsic
        for space in spaces.values():
            for name, value in space.items():
                if id(value) in made and hasattr(value, "py_func"):
                    space[name] = made[id(value)]
        _state["twins"] = {disp.py_func.__name__: made[key] for key, disp in dispatchers.items()}
    return _state["twins"]


def use_twins(disp, args: tuple, work: float) -> bool:
    """Whether a call of estimated `work` runs the twins rather than `disp`'s machine code (auto
    mode): only a small call (work < TWIN_WORK) whose kernel is not in memory yet, and then
    - nothing is cached: the twins answer while a background process compiles (started here);
    - the kernels are cached: loading them costs ~0.35 s (numba's import and the machine code),
      more than the twins spend on one short sentence. So the twins run until their work in this
      process adds up to LOAD_WORK (about the same time), then the kernels are loaded: a process
      that makes one small call never pays the load, one that makes many pays it once.
    """
    if not _jit.JIT or work >= TWIN_WORK or _in_memory(disp):
        return False
    if not _cached(disp):
        start_background_compile()
        return True
    if _state["twin_work"] + work <= LOAD_WORK:
        _state["twin_work"] += work
        return True
    return False


def _in_memory(disp) -> bool:
    """`disp` has machine code in this process (loaded by `loaded`, or compiled here)."""
    return id(disp) in _state["ready"] or bool(getattr(disp, "overloads", None))


def _cached(disp) -> bool:
    """numba's cache holds `disp` (its index file exists; True when numba's layout is unknown)."""
    index = getattr(getattr(getattr(disp, "_cache", None), "_cache_file", None), "_index_path", None)
    return index is None or os.path.exists(index)


def loaded(disp, args: tuple) -> bool:
    """Whether `disp` has machine code for these arguments in memory, or loads it from the cache
    now (what numba's own dispatch does first, minus the compile)."""
    if not _jit.JIT or id(disp) in _state["ready"]:
        return True
    if not _cached(disp):  # skip numba's typing and lookup
        return False
    try:
        from numba.core.compiler_lock import global_compiler_lock

        sig = tuple(disp.typeof_pyval(a) for a in args)
        if sig not in disp.overloads:
            with global_compiler_lock:
                cres = disp._cache.load_overload(sig, disp.targetctx)
                if cres is None:
                    return False
                disp.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
                disp.add_overload(cres)
    except Exception:  # pragma: no cover - numba's internals moved: let the call compile as usual
        pass
    _state["ready"].add(id(disp))
    return True


def _lock_path() -> Path:
    return (
        Path(tempfile.gettempdir())
        / f"attnflow-numba-compile-{os.getuid() if hasattr(os, 'getuid') else 0}.lock"
    )


def compiling_elsewhere() -> bool:
    """A background compile (of any process of this user) holds the lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock, at worst two compiles
        return False
    with open(_lock_path(), "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def start_background_compile() -> None:
    """One detached process that compiles every kernel into numba's cache (`warm_up`)."""
    if _state["child"] is not None or compiling_elsewhere():
        return
    package_root = str(Path(__file__).resolve().parents[3])  # the folder holding attnflow/
    env = dict(os.environ, ATTNFLOW_JIT="compile")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    code = (
        "import fcntl, os, sys\n"
        "os.nice(10)\n"  # behind the call that is waiting for its explanation
        f"fh = open({str(_lock_path())!r}, 'a')\n"
        "try:\n    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(0)\n"
        "from attnflow.explain._maxflow import warm_up\nwarm_up()\n"
    )
    _state["child"] = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for_background_compile() -> None:
    """Until no background compile (ours or another process's) holds the lock."""
    if _state["child"] is not None:
        _state["child"].wait()
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return
    with open(_lock_path(), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fcntl.flock(fh, fcntl.LOCK_UN)
