"""The token pass as a small C kernel (AVX2 + FMA, OpenMP) for float32 tensors on CPU.

``torch.compile`` lowers the fused token pass into two loops that spill registers around
both exponentials (about 2.2x the read-once floor at 8M tokens on a 2-core AVX2 machine).
``_token_native.c`` computes the same statistics, with the same masking and the same
polynomial exponentials, in passes over cache-resident row segments (about 1.4x; see
``benchmarks/bench_loss.py``). It is built on first use with the C compiler that
``torch.compile`` needs anyway, cached on disk per source and compiler, and loaded with
``ctypes`` into the torch process, where its OpenMP calls run on torch's own thread pool.

Anything short of a working kernel (no AVX2, no compiler, a failed build or load, an input
it does not take) returns ``None`` and the caller uses the compiled or eager path; a failed
build or load warns once. ``GRPO_MONITOR_NATIVE=0`` (or ``GRPO_MONITOR_COMPILE=0``)
turns it off; ``GRPO_MONITOR_CACHE_DIR`` moves the build cache.

Loading a shared library runs its code, so the cache is trusted only when it is private
(``grpo_monitor.private_files``): the folder and the library must be owned by the current
user and writable by nobody else. The preferred cache is ``$GRPO_MONITOR_CACHE_DIR`` or
``~/.cache/grpo_monitor``; where that cannot be created (``HOME=/`` under ``docker --user``)
it is ``<tmp>/grpo_monitor-<uid>``, a name anyone can predict and pre-create. A folder that
fails the check is never read: the kernel is built in a fresh private folder instead, with
one warning naming the unsafe path; a library that fails it is rebuilt over.

Inside a caller's ``torch.compile`` the kernel is reached only through the custom op of
``tokens`` (Dynamo must not trace a ``ctypes`` call), so everything read while tracing
(``enabled``, ``accepts``) is plain Python on cached values.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import torch

from ..private_files import UnsafePathError, check_private, private_dir, user_private_dir

SOURCE = Path(__file__).with_name("_token_native.c")
FLAGS = ("-O2", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC")
_MASK_KINDS = {torch.float32: 0, torch.bool: 1, torch.uint8: 1, torch.int32: 2, torch.int64: 3}
_STATE: dict[str, object] = {"lib": None, "broken": False}
_CPU = torch.backends.cpu.get_cpu_capability()  # read once: not traceable by Dynamo, fixed for the process


def enabled() -> bool:
    """Whether the native path may be tried in this process (env switches, CPU, no earlier failure)."""
    if _STATE["broken"] or "0" in (os.environ.get("GRPO_MONITOR_NATIVE"), os.environ.get("GRPO_MONITOR_COMPILE")):
        return False
    return _CPU in ("AVX2", "AVX512")


def accepts(mask: torch.Tensor, tensors: Sequence[torch.Tensor | None]) -> bool:
    """Whether the kernel takes these inputs: CPU, contiguous, float32 values, a known mask dtype."""
    if mask.device.type != "cpu" or mask.dtype not in _MASK_KINDS or not mask.is_contiguous():
        return False
    present = [t for t in tensors if t is not None]
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in present)


def token_stats(mask: torch.Tensor, adv, lp, ref, old, kl, clip_log: tuple[float, float],
                clamp: tuple[float, float] | None, fields: Sequence[str]) -> torch.Tensor | None:
    """The float64 statistics vector laid out by ``fields`` (``TOKEN_FIELDS``), or ``None``."""
    lib = _library(fields)
    if lib is None:
        return None
    B, T = mask.shape
    threads = max(1, min(torch.get_num_threads(), B))
    scratch = torch.empty(threads, len(fields), dtype=torch.float64)
    out = torch.empty(len(fields), dtype=torch.float64)
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    lo, hi = clamp if clamp is not None else (0.0, 0.0)
    lib.grpo_token_stats(B, T, mask.data_ptr(), _MASK_KINDS[mask.dtype], ptr(adv), 0 if adv is None else adv.dim(),
                         ptr(lp), ptr(ref), ptr(old), ptr(kl), clip_log[0], clip_log[1], int(clamp is not None),
                         lo, hi, threads, scratch.data_ptr(), out.data_ptr())
    return out


def _library(fields: Sequence[str]):
    """The loaded kernel, built on first use; ``None`` (warned once) when that fails."""
    if _STATE["lib"] is None and not _STATE["broken"]:
        try:
            _STATE["lib"] = _load(_build(), fields)
        except Exception as exc:  # noqa: BLE001 - any failure: fall back, keep training
            _STATE["broken"] = True
            warnings.warn(f"grpo-monitor: the native token kernel is unavailable ({type(exc).__name__}: "
                          f"{str(exc)[:300]}); using the torch.compile / eager path", RuntimeWarning, stacklevel=4)
    return _STATE["lib"]


def compiler() -> str:
    """The C compiler: ``$CC``, else gcc, cc or clang on the PATH."""
    for name in (os.environ.get("CC"), "gcc", "cc", "clang"):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise RuntimeError("no C compiler found (set CC, or install gcc)")


def cache_dir() -> Path:
    """``$GRPO_MONITOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/grpo_monitor`` (``~/.cache/grpo_monitor``)."""
    explicit = os.environ.get("GRPO_MONITOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grpo_monitor"


def library_name() -> str:
    """File name of the library for this source, compiler and flags (its cache key)."""
    key = SOURCE.read_bytes() + compiler().encode() + " ".join(FLAGS).encode()
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
        warnings.warn(f"grpo-monitor: not loading the native token kernel from an unsafe cache ({'; '.join(problems)}); "
                      f"building it in {folder} instead", RuntimeWarning, stacklevel=5)
    return target if cached else _compile_into(target)


def _compile_into(target: Path) -> Path:
    """Compile the kernel to a private temporary file in ``target``'s folder, then rename it to ``target``."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)  # 0600, in a folder only we can write
    os.close(fd)
    try:
        cc = compiler()
        res = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=120)
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
    fn.argtypes = [i64, i64, ptr, i64, ptr, i64, ptr, ptr, ptr, ptr, dbl, dbl, i64, dbl, dbl, i64, ptr, ptr]
    fn.restype = i64
    return lib
