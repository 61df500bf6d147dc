"""Four backends for the token pass behind one protocol, and the one function that picks one.

==========  ===================================================  ===========================
backend     what it is                                            takes
==========  ===================================================  ===========================
triton      the Triton kernel (``triton_kernel.py``), every      CUDA tensors, float32, float16
            slot, seven inputs included, in one launch            or bfloat16 values, any strides
native      the C kernel (``native_kernel.c``, AVX2 + OpenMP)     contiguous CPU float32 values
compiled    ``torch_rows`` under ``torch.compile`` (polynomial    anything, until a compile
            exponentials, one vectorised loop)                    fails in this process
eager       ``torch_rows`` op by op, in row blocks                anything
==========  ===================================================  ===========================

``select_backend`` is the only place that chooses: ``compile=False``, ``compile="auto"``
below ``AUTO_COMPILE_MIN_TOKENS`` token slots, or ``GRPO_MONITOR_COMPILE=0`` give eager (except
that ``"auto"`` gives a micro-batch of ``AUTO_NATIVE_MIN_TOKENS`` slots or more the C kernel when it takes it:
nothing is compiled per input);
otherwise, for CUDA tensors where ``triton`` imports, the Triton kernel (skipped with
``GRPO_MONITOR_TRITON=0``), then the first of native (skipped with ``GRPO_MONITOR_NATIVE=0``)
and compiled that accepts the inputs, else eager. (``TRITON`` is outside ``BACKENDS``, the CPU
order; on a CPU it runs only when called directly under ``TRITON_INTERPRET=1``: the tests.)
Every backend returns the same float64 vector laid out by the field table, and every one but
triton (which declines there) runs inside a caller's ``torch.compile`` (see ``run``).

Whether the C kernel keeps its place, in figures (``benchmarks/bench_loss.py --sizes 1M,8M
--reps 15``; 2-core AVX-512 CPU, torch 2.13, float32, five inputs; median ms per call):

============  ======  ========  =====  ===============
tokens        native  compiled  eager  read-once floor
============  ======  ========  =====  ===============
1M            0.55    1.82      32     0.40
8M            9.1     15.6      258    6.1
8M, |u|~1     10.9    16.3      -      5.4
8M, 1 thread  18.1    33.4      -      12.0
============  ======  ========  =====  ===============

With ``sampler_logprobs`` and ``entropy`` (``--sampler``, seven inputs) the compiled pass takes a minute
or more to build the |Delta| histogram's scatter and runs at ~20x the floor, so it declines them:
they take the C kernel (1.5-1.6x the floor in CPU time on right-padded rows, 2.1x on dense ones;
docs/mismatch.md, "Cost") or, elsewhere, the eager pass.

First call in a process: native 0.4 s (building the library; 0.01 s once cached), compiled
3-7 s with a warm inductor cache and 20 s cold, per combination of inputs. It keeps its
place: 1.7-3.3x faster than the compiled pass at steady state (1.4-1.5x the floor against 2.6-4.6x),
and a start in well under a second where inductor takes seconds, which is what short CPU
processes (CI, tests, notebooks) notice. The savings are milliseconds per micro-batch,
small next to any CPU training step, so no statistic should wait for its C version; if
the C row function's upkeep grows, demoting it is one line here (skip ``NATIVE`` unless
``GRPO_MONITOR_NATIVE=1``). On CUDA the compiled pass is the path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch

from . import native_build
from .arguments import TENSOR_NAMES, TokenInputs
from .table import FIELDS, TOKEN_LAYOUT
from .torch_rows import token_vector

#: ``compile="auto"`` compiles only micro-batches with at least this many token slots
#: (smaller ones take milliseconds eagerly; a compile takes seconds once per process).
AUTO_COMPILE_MIN_TOKENS = 1 << 18
#: ``compile="auto"`` gives smaller micro-batches of at least this many token slots the C kernel when it takes them
#: (built once per machine, not per input; ``_small_native``), smaller ones the eager pass.
AUTO_NATIVE_MIN_TOKENS = 1 << 10
#: ``torch.compile`` options of the pass: keep every intermediate in registers (the default
#: thresholds write the reduced argument r to memory, a full extra pass) and let the C++
#: compiler fuse multiply-adds (the polynomial and the sums of squares; only more exact).
COMPILE_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {
    "realize_opcount_threshold": 1 << 20, "realize_reads_threshold": 1 << 20, "realize_acc_reads_threshold": 1 << 20,
    "cpp.enable_floating_point_contract_flag": "fast",
}


class Backend(Protocol):
    """One way to compute the token statistics vector."""

    name: str

    def accepts(self, x: TokenInputs) -> bool:
        """Whether this backend can compute ``x`` now (device, dtypes, layout, no earlier failure)."""
        ...

    def run(self, x: TokenInputs) -> torch.Tensor:
        """The float64 vector laid out by ``TOKEN_FIELDS``; also while Dynamo traces a caller."""
        ...


def is_compiling() -> bool:
    """Whether Dynamo is tracing this call (torch < 2.3 lacks ``torch.compiler.is_compiling``)."""
    if hasattr(torch.compiler, "is_compiling"):
        return torch.compiler.is_compiling()
    dynamo = sys.modules.get("torch._dynamo")  # never imported: nothing can be compiling
    return dynamo is not None and dynamo.is_compiling()


def by_row_blocks(x: TokenInputs, elements: int, fn: Callable[[TokenInputs], torch.Tensor]) -> torch.Tensor:
    """``fn`` over blocks of about ``elements`` token slots (bounded temporaries), blocks merged."""
    B, T = x.mask.shape
    if B * T == 0:
        return TOKEN_LAYOUT.empty(x.mask.device)  # no tokens: every slot at its identity
    rows = max(1, elements // T)
    out = fn(x.row_block(0, rows))
    for start in range(rows, B, rows):
        out = TOKEN_LAYOUT.combine(out, fn(x.row_block(start, start + rows)))
    return out


class EagerBackend:
    """``torch_rows`` op by op, 2^15 token slots at a time; inside a caller's compile, inlined into its graph."""

    name = "eager"
    block = 1 << 15

    def accepts(self, x: TokenInputs) -> bool:
        return True

    def run(self, x: TokenInputs) -> torch.Tensor:
        return token_vector(x) if is_compiling() else by_row_blocks(x, self.block, token_vector)


class CompiledBackend:
    """``torch_rows`` with polynomial exponentials, ``torch.compile``-d once per input combination.

    Dynamic shapes: a new (B, T) does not recompile. The variants share one code object,
    hence Dynamo's recompile limit (8): beyond it Dynamo runs it eagerly. Any compile
    failure warns once and sends the rest of the process to eager. Inside a caller's
    compile the pass is traced inline and compiled with the caller's graph (a nested
    ``torch.compile`` would be a graph break at best).
    """

    name = "compiled"
    block = 1 << 22  # token slots per compiled call: bounds memory should a backend materialise

    def __init__(self) -> None:
        self.broken = False
        self.kernels: dict[tuple, Callable] = {}

    def accepts(self, x: TokenInputs) -> bool:
        """Not with sampler log-probs or entropies: inductor takes minutes to build the |Delta| histogram's
        scatter (323 s at 8M tokens, benchmarks/bench_loss.py --sampler) and runs it at ~30x the read-once
        floor, so those inputs take the Triton kernel on CUDA, the C kernel where it runs (CPU float32) and the
        eager pass otherwise."""
        return not self.broken and x.get("sampler_logprobs") is None and x.get("entropy") is None

    def run(self, x: TokenInputs) -> torch.Tensor:
        if is_compiling():
            return token_vector(x, fast=True)
        try:
            kernel = self._kernel(x)
            with torch._dynamo.config.patch(specialize_float=True):  # constants as literals, not scalar tensor inputs
                return by_row_blocks(x, self.block, lambda blk: kernel(blk.mask, *blk.values))
        except Exception as exc:  # noqa: BLE001 - whatever the backend raises, stay correct
            self.broken = True
            warnings.warn(f"grpo-monitor: torch.compile of the token statistics failed "
                          f"({native_build.describe(exc, 300)}); the token statistics use the eager path for the "
                          "rest of the process.", RuntimeWarning, stacklevel=4)
            return EAGER.run(x)

    def _kernel(self, x: TokenInputs) -> Callable:
        """The compiled pass for this combination of present inputs and constants, compiled on first use."""
        key = (tuple(None if t is None else t.dim() for t in x.values), x.clip_log, x.clamp, x.band_log, x.entropy_low)
        if key not in self.kernels:
            clip_log, clamp, band_log, low = x.clip_log, x.clamp, x.band_log, x.entropy_low

            def kernel(mask, *values):
                return token_vector(TokenInputs(mask, values, clip_log, clamp, band_log, low), fast=True)

            self.kernels[key] = torch.compile(kernel, dynamic=True, options=COMPILE_OPTIONS)
        return self.kernels[key]


class NativeBackend:
    """The C kernel: CPU float32, one pass over cache-resident row segments (see ``native_kernel.c``).

    Outside a compile it is called through ``ctypes``; ``accepts`` builds and loads it on
    first use (a failure warns once and the kernel is passed over from then on). While
    Dynamo traces a caller it enters the graph as the custom op
    ``grpo_monitor::native_token_stats``, opaque to Dynamo: Dynamo must never trace into the
    ``ctypes`` call (it did: the process aborted with a corrupted heap). Not
    ``torch.compiler.disable``: under ``fullgraph=True`` Dynamo refuses to call a disabled
    function (torch 2.13: "Skip inlining ``torch.compiler.disable()``d function"), while an op
    is a node of the one graph either way. Everything read while tracing is plain Python on
    cached values.
    """

    name = "native"

    def accepts(self, x: TokenInputs) -> bool:
        if not native_build.cpu_supported() or not _native_layout(x):
            return False
        return native_token_stats is not None if is_compiling() else native_build.loaded()

    def run(self, x: TokenInputs) -> torch.Tensor:
        if is_compiling() and native_token_stats is not None:
            clamp = x.clamp if x.clamp is not None else (0.0, 0.0)
            return native_token_stats(x.mask, *x.values, x.clip_log[0], x.clip_log[1], x.clamp is not None, *clamp,
                                      *x.band_log, x.entropy_low, len(FIELDS))
        vec = native_build.token_stats(x)
        return vec if vec is not None else EAGER.run(x)


def _native_layout(x: TokenInputs) -> bool:
    """CPU, contiguous, float32 values and a mask dtype the kernel reads (every input, sampler log-probs and
    entropies included: the C row function computes every slot)."""
    m = x.mask
    if m.device.type != "cpu" or m.dtype not in native_build.MASK_KINDS or not m.is_contiguous():
        return False
    present = [t for t in x.values if t is not None]
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in present)


#: The op's scalar arguments after the token tensors (``slots``: ``len(FIELDS)``).
_OP_SCALARS = ("float clip_lo, float clip_hi, bool has_clamp, float clamp_lo, float clamp_hi, float band_lo, "
               "float band_hi, float entropy_low, int slots")
#: The op's schema: the mask, every value tensor of the token-input table (optional), then the scalars.
OP_SCHEMA = f"(Tensor mask, {', '.join(f'Tensor? {n}' for n in TENSOR_NAMES)}, {_OP_SCALARS}) -> Tensor"


def _native_op(mask: torch.Tensor, *args: Any) -> torch.Tensor:
    """The C kernel as an operator (``OP_SCHEMA``: the mask, the value tensors in ``TENSOR_NAMES`` order, then
    clip_lo, clip_hi, has_clamp, clamp_lo, clamp_hi, band_lo, band_hi, entropy_low, slots); the eager backend
    should the library be unavailable (an op must return).

    Called only from compiled graphs: a custom op's first call costs about a second of
    dispatcher set-up, which eager callers skip by calling ``native_build.token_stats`` directly.
    ``slots`` is the vector's length, ``len(FIELDS)``: an argument, so that it is a constant of
    every graph holding the op and so part of inductor's cache key. (Without it, inductor's FX
    graph cache served graphs compiled against an older field table, of 30 slots, whose size
    check then failed on the 141 this version returns: the op's name and arguments were alike.)
    """
    n = len(TENSOR_NAMES)
    values, (clip_lo, clip_hi, has_clamp, clamp_lo, clamp_hi, band_lo, band_hi, entropy_low, slots) = args[:n], args[n:]
    if slots != len(FIELDS):
        raise ValueError(f"slots is {slots} but the field table has {len(FIELDS)}; pass len(FIELDS)")
    x = TokenInputs(mask, tuple(values), (clip_lo, clip_hi), (clamp_lo, clamp_hi) if has_clamp else None,
                    (band_lo, band_hi), entropy_low)
    vec = native_build.token_stats(x)
    return vec if vec is not None else EAGER.run(x)


def _native_op_fake(mask: torch.Tensor, *args: Any) -> torch.Tensor:
    """What the op returns, for tracing: an empty float64 vector of ``slots`` (one per field; the last argument)."""
    return mask.new_empty(args[-1], dtype=torch.float64)


def _register_native_op():
    """``grpo_monitor::native_token_stats``; ``None`` before torch 2.4 (compiled callers then trace torch_rows)."""
    if not hasattr(torch.library, "custom_op"):
        return None
    op = torch.library.custom_op("grpo_monitor::native_token_stats", mutates_args=(), device_types="cpu",
                                 schema=OP_SCHEMA)(_native_op)
    op.register_fake(_native_op_fake)
    return op


class TritonBackend:
    """The Triton kernel (``triton_kernel``): CUDA tensors where ``triton`` imports, CPU tensors only under
    ``TRITON_INTERPRET=1`` (set before ``triton`` is imported). A missing ``triton`` is passed over silently; a
    failed import or launch warns once and sends the rest of the process to the other backends. Declines while
    Dynamo traces a caller (the launch is host code: the caller's graph takes the torch form inline)."""

    name = "triton"
    value_dtypes = (torch.float32, torch.float16, torch.bfloat16)

    def __init__(self) -> None:
        self.broken = False
        self.kernel: Any = None

    def accepts(self, x: TokenInputs) -> bool:
        kind = x.mask.device.type
        interpreted = kind == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
        if self.broken or (kind != "cuda" and not interpreted) or is_compiling() or not self._load():
            return False
        if kind == "cpu" and not self.kernel.INTERPRETED:
            return False
        return all(t.dtype in self.value_dtypes for t in x.values if t is not None)

    def run(self, x: TokenInputs) -> torch.Tensor:
        try:
            return self.kernel.token_stats(x)
        except Exception as exc:  # noqa: BLE001 - whatever the launch raises, stay correct
            self._fail(exc)
            return select_backend(x, True).run(x)

    def _load(self) -> bool:
        """Import the kernel module on first use; ``False`` without ``triton`` (silently) or after a failure."""
        if self.kernel is None and not self.broken:
            if importlib.util.find_spec("triton") is None:
                self.broken = True
                return False
            try:
                from . import triton_kernel
                self.kernel = triton_kernel
            except Exception as exc:  # noqa: BLE001 - a broken triton install: fall back, keep training
                self._fail(exc)
        return self.kernel is not None and not self.broken

    def _fail(self, exc: BaseException) -> None:
        self.broken = True
        warnings.warn(f"grpo-monitor: the Triton token kernel failed ({native_build.describe(exc, 300)}); the token "
                      "statistics use the other backends for the rest of the process.", RuntimeWarning, stacklevel=5)


native_token_stats = _register_native_op()
EAGER, COMPILED, NATIVE, TRITON = EagerBackend(), CompiledBackend(), NativeBackend(), TritonBackend()
#: Every backend, in the order ``select_backend`` tries them.
BACKENDS: tuple[Backend, ...] = (NATIVE, COMPILED, EAGER)


def compile_asked(compile: bool | str) -> bool:
    """Whether the user asked for compiling (``compile=True`` or ``GRPO_MONITOR_COMPILE=1``), not just allowed it."""
    return compile is True or os.environ.get("GRPO_MONITOR_COMPILE") == "1"


def wants_compile(compile: bool | str, numel: int) -> bool:
    """Whether ``compile=`` and ``GRPO_MONITOR_COMPILE`` allow a compiled backend (native or torch.compile) here."""
    wanted = compile is True or (compile == "auto" and numel >= AUTO_COMPILE_MIN_TOKENS)
    return wanted and os.environ.get("GRPO_MONITOR_COMPILE", "1") != "0"


def _small_native(x: TokenInputs) -> bool:
    """Whether a micro-batch too small to compile takes the C kernel under ``compile="auto"``: from
    ``AUTO_NATIVE_MIN_TOKENS`` token slots, where the kernel accepts the inputs. Nothing is compiled per input (one
    build per machine, 0.4 s, then a cached load), and on a step's few thousand tokens the kernel is ~14x faster
    than the eager pass's ~150 small operations (75 us against 1.05 ms at 256 x 8 tokens, five inputs;
    ``benchmarks/bench_step.py``). Below it (toy batches: examples, tests) the build would cost more than it saves,
    and they stay eager. Off with ``GRPO_MONITOR_NATIVE=0`` or ``GRPO_MONITOR_COMPILE=0``."""
    if x.mask.numel() < AUTO_NATIVE_MIN_TOKENS:
        return False
    if os.environ.get("GRPO_MONITOR_NATIVE") == "0" or os.environ.get("GRPO_MONITOR_COMPILE") == "0":
        return False
    return NATIVE.accepts(x)


def select_backend(x: TokenInputs, compile: bool | str = "auto") -> Backend:
    """The backend for ``x``: eager unless compiling is wanted (or native, under ``"auto"``, for a micro-batch of
    ``AUTO_NATIVE_MIN_TOKENS`` slots or more that the C kernel takes: :func:`_small_native`), else native, compiled,
    eager, the first that accepts.

    When the C kernel could not be built for want of a C compiler, ``torch.compile`` (which needs one too, and takes
    7-160 s to fail) is skipped unless the user asked for it (:func:`compile_asked`).

    >>> from grpo_monitor.stats.tokens.arguments import token_inputs
    >>> select_backend(token_inputs(torch.ones(2, 3)), compile=False).name
    'eager'
    """
    if not wants_compile(compile, x.mask.numel()):
        return NATIVE if compile == "auto" and _small_native(x) else EAGER
    if x.mask.device.type == "cuda" and os.environ.get("GRPO_MONITOR_TRITON") != "0" and TRITON.accepts(x):
        return TRITON
    for backend in BACKENDS:
        if backend is NATIVE and os.environ.get("GRPO_MONITOR_NATIVE") == "0":
            continue
        if backend is COMPILED and native_build.no_compiler() and not compile_asked(compile):
            return EAGER
        if backend.accepts(x):
            return backend
    return EAGER
