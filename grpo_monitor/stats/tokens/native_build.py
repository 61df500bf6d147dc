"""Build, cache and load the C token kernel (``native_kernel.c``: AVX2 + FMA, OpenMP).

The kernel is built on first use with the C compiler that ``torch.compile`` needs anyway,
from its source preceded by a header generated from the field table (the slot enum, each
slot's reduction and the slot order string ``grpo_token_fields``), so the C code names
slots but never lists them. The library is cached on disk per source, header, compiler
and flags, and loaded with ``ctypes`` into the torch process, where its OpenMP calls run
on torch's own thread pool; at load its ``grpo_token_fields`` must equal ``TOKEN_FIELDS``.

Anything short of a working kernel (no compiler, a failed build or load) returns ``None``
from ``token_stats`` and warns once; the backend selection then passes the kernel over for
the rest of the process, and without a C compiler it skips ``torch.compile`` too (which
needs one) unless asked for (:func:`no_compiler`). ``GRPO_MONITOR_CACHE_DIR`` moves the build cache.

Loading a shared library runs its code, so the cache is trusted only when it is private
(``grpo_monitor.repro.private_files``): the folder and the library must be owned by the current
user and writable by nobody else. The preferred cache is ``$GRPO_MONITOR_CACHE_DIR`` or
``~/.cache/grpo_monitor``; where that cannot be created (``HOME=/`` under ``docker --user``)
it is ``<tmp>/grpo_monitor-<uid>``, a name anyone can predict and pre-create. A folder that
fails the check is never read: the kernel is built in a fresh private folder instead, with
one warning naming the unsafe path; a library that fails it is rebuilt over.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from ...repro.private_files import UnsafePathError, check_private, private_dir, user_private_dir
from .arguments import TokenInputs
from .table import HIST_BINS, HIST_HIGH_EXP, HIST_LOW_EXP, TOKEN_FIELDS, VALUE_INPUTS

SOURCE = Path(__file__).with_name("native_kernel.c")
FLAGS = ("-O2", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC")
MASK_KINDS = {torch.float32: 0, torch.bool: 1, torch.uint8: 1, torch.int32: 2, torch.int64: 3}
_OP_CODES = {"sum": 0, "min": 1, "max": 2}
_STATE: dict[str, object] = {"lib": None, "broken": False, "no_compiler": False}
_CPU = torch.backends.cpu.get_cpu_capability()  # read once: not traceable by Dynamo, fixed for the process


def cpu_supported() -> bool:
    """Whether this CPU runs the kernel (AVX2) and no build or load has failed in this process."""
    return _CPU in ("AVX2", "AVX512") and not _STATE["broken"]


class _NoCompiler(RuntimeError):
    """No C compiler to build with: none on the PATH, or the one found cannot be run (internal, never raised out)."""


def no_compiler() -> bool:
    """Whether the build failed in this process for want of a C compiler (``torch.compile`` needs one too)."""
    return bool(_STATE["broken"] and _STATE["no_compiler"])


def loaded() -> bool:
    """Whether the library is (now) loaded: builds it on first call, ``False`` (warned once) if that fails."""
    return _library() is not None


def unload() -> None:
    """Forget the loaded library: the next token pass loads it again from :func:`cache_dir`, or builds it
    there when that folder has none (``benchmarks/bench_loss.py`` times a cold build this way)."""
    _STATE["lib"] = None


def token_stats(x: TokenInputs) -> torch.Tensor | None:
    """The float64 statistics vector of ``x`` laid out by ``TOKEN_FIELDS``, or ``None`` without a library.

    ``x`` must be what the native backend accepts: contiguous CPU float32 values, a mask of a ``MASK_KINDS`` dtype.
    """
    lib = _library()
    if lib is None:
        return None
    B, T = x.mask.shape
    threads = max(1, min(torch.get_num_threads(), B))
    scratch = torch.empty(threads, len(TOKEN_FIELDS), dtype=torch.float64)
    out = torch.empty(len(TOKEN_FIELDS), dtype=torch.float64)
    inputs = (ctypes.c_void_p * len(x.values))(*(None if t is None else t.data_ptr() for t in x.values))
    adv = x.get("advantages")
    lo, hi = x.clamp if x.clamp is not None else (0.0, 0.0)
    lib.grpo_token_stats(B, T, x.mask.data_ptr(), MASK_KINDS[x.mask.dtype], 0 if adv is None else adv.dim(), inputs,
                         x.clip_log[0], x.clip_log[1], int(x.clamp is not None), lo, hi, x.band_log[0], x.band_log[1],
                         x.entropy_low, threads, scratch.data_ptr(), out.data_ptr())
    return out


def _library():
    """The loaded kernel, built on first use; ``None`` (warned once) when that fails."""
    if _STATE["lib"] is None and not _STATE["broken"]:
        try:
            _STATE["lib"] = _load(_build(), [name for name, _ in TOKEN_FIELDS])
        except Exception as exc:  # noqa: BLE001 - any failure: fall back, keep training
            _STATE.update(broken=True, no_compiler=isinstance(exc, _NoCompiler))
            warnings.warn(unavailable_text(exc), RuntimeWarning, stacklevel=5)
    return _STATE["lib"]


def unavailable_text(exc: Exception) -> str:
    """The one warning of a failed build, whole sentences; without a compiler it says eager follows directly."""
    if isinstance(exc, _NoCompiler):
        return (f"grpo-monitor: the native token kernel is unavailable: {exc}. The token statistics use the eager "
                "path; torch.compile, which needs a C compiler too, is not tried (set GRPO_MONITOR_COMPILE=1 to try "
                "it anyway).")
    return (f"grpo-monitor: the native token kernel is unavailable ({describe(exc, 300)}); the token statistics use "
            "the torch.compile or eager path.")


def describe(exc: BaseException, limit: int) -> str:
    """``Type: message`` on one line, cut at a word before ``limit`` characters and marked ``[...]`` if cut.

    >>> describe(RuntimeError("gcc failed: " + "x " * 100), 30)
    'RuntimeError: gcc failed: x x [...]'
    """
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " [...]"


def generated_header(fields: Sequence[tuple[str, str]] = TOKEN_FIELDS) -> str:
    """The C declarations the two tables imply: from the token inputs, the X-macro ``TOKEN_INPUTS(X)`` of their
    C names and ``NINPUTS`` (``grpo_token_stats`` takes their pointers as one array in that order); from the
    field table, the ``S_<name>`` slot enum, ``NFIELDS``, ``field_op``, the |Delta| histogram's constants and
    the exported slot order ``grpo_token_fields`` (checked against ``TOKEN_FIELDS`` at load). The kernel
    writes the histogram's slots as ``S_mm_hist_0 + bin``, so they must be consecutive."""
    names = [name for name, _ in fields]
    first = names.index("mm_hist_0")
    if names[first:first + HIST_BINS] != [f"mm_hist_{i}" for i in range(HIST_BINS)]:
        raise ValueError(f"the {HIST_BINS} mm_hist_* slots must be consecutive in TOKEN_FIELDS")
    return ("/* generated from TOKEN_INPUTS and TOKEN_FIELDS by grpo_monitor/stats/tokens/native_build.py */\n"
            f"#define TOKEN_INPUTS(X) {' '.join(f'X({i.c_name})' for i in VALUE_INPUTS)}\n"
            f"enum {{ {', '.join(f'IN_{i.c_name}' for i in VALUE_INPUTS)}, NINPUTS }};\n"
            f"enum {{ {', '.join(f'S_{n}' for n in names)}, NFIELDS }};\n"
            "enum { OP_SUM = 0, OP_MIN = 1, OP_MAX = 2 };\n"
            f"enum {{ HIST_LOW_EXP = {HIST_LOW_EXP}, HIST_HIGH_EXP = {HIST_HIGH_EXP}, HIST_BINS = {HIST_BINS} }};\n"
            f"static const int field_op[NFIELDS] = {{{', '.join(str(_OP_CODES[op]) for _, op in fields)}}};\n"
            f'const char grpo_token_fields[] = "{",".join(names)}";\n#line 1 "native_kernel.c"\n')


def source_text() -> str:
    """What is compiled: the generated header, then ``native_kernel.c``."""
    return generated_header() + SOURCE.read_text()


def compiler() -> str:
    """The C compiler: ``$CC``, else gcc, cc or clang on the PATH."""
    for name in (os.environ.get("CC"), "gcc", "cc", "clang"):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise _NoCompiler("no C compiler found (set CC, or install gcc)")


def cache_dir() -> Path:
    """``$GRPO_MONITOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/grpo_monitor`` (``~/.cache/grpo_monitor``)."""
    explicit = os.environ.get("GRPO_MONITOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grpo_monitor"


def library_name() -> str:
    """File name of the library for this source (header included), compiler and flags: its cache key."""
    key = source_text().encode() + compiler().encode() + " ".join(FLAGS).encode()
    return f"token_native-{hashlib.sha256(key).hexdigest()[:16]}.so"


def _build() -> Path:
    """The shared library for this source, compiler and flags, compiled unless privately cached.

    The build writes a private temporary file and renames it into place, so concurrent
    processes (the ranks of one job) never load a half-written library; the rename replaces
    whatever held the name (a symlink itself, never its target).
    """
    folder, problems = _cache_folder()
    target = folder / library_name()
    cached = os.path.lexists(target)
    if cached:
        try:
            check_private(target, kind="file")
        except UnsafePathError as exc:
            problems.append(str(exc))
            cached = False
    if problems:
        warnings.warn(f"grpo-monitor: not loading the native token kernel from an unsafe cache "
                      f"({'; '.join(problems)}); building it in {folder} instead", RuntimeWarning, stacklevel=5)
    return target if cached else _compile_into(target)


def _compile_into(target: Path) -> Path:
    """Compile the kernel to a private temporary file in ``target``'s folder, then rename it to ``target``."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)  # 0600, in a folder only we can write
    os.close(fd)
    try:
        cc = compiler()
        try:
            res = subprocess.run([cc, *FLAGS, "-o", tmp, "-x", "c", "-"], input=source_text(), capture_output=True,
                                 text=True, timeout=120)
        except OSError as exc:  # not there, not executable: no compiler to build with
            raise _NoCompiler(f"the C compiler {cc} cannot be run ({exc.strerror or exc})") from exc
        if res.returncode != 0:
            raise RuntimeError(f"{Path(cc).name} failed: {res.stderr.strip()[-500:]}")
        os.chmod(tmp, 0o700)  # the linker may recreate the file with the umask's group bits
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return check_private(target, kind="file")


def _cache_folder() -> tuple[Path, list[str]]:
    """A private folder for the library and why preferred ones were refused.

    ``cache_dir()`` if it can be created and is private; else ``<tmp>/grpo_monitor-<uid>``
    if private; else a fresh ``mkdtemp`` folder. A folder we cannot create is skipped
    silently; one that exists but is not private is reported.
    """
    problems: list[str] = []
    try:
        return private_dir(cache_dir()), problems
    except UnsafePathError as exc:
        problems.append(str(exc))
    except OSError:
        pass  # not creatable (read-only or foreign HOME): the temporary folder is the usual place then
    folder, why = user_private_dir("grpo_monitor")
    if why is not None:
        problems.append(why)
    return folder, problems


def _load(path: Path, fields: Sequence[str]):
    """``ctypes`` handle with argument types set; its slot order must equal ``fields``."""
    lib = ctypes.CDLL(str(path))
    order = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "grpo_token_fields"))).decode()
    if order.split(",") != list(fields):
        raise RuntimeError(f"{path.name} lays out {order.count(',') + 1} slots differently from TOKEN_FIELDS")
    i64, dbl, ptr = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    fn = lib.grpo_token_stats
    fn.argtypes = [i64, i64, ptr, i64, i64, ptr, dbl, dbl, i64, dbl, dbl, dbl, dbl, dbl, i64, ptr, ptr]
    fn.restype = i64
    return lib
