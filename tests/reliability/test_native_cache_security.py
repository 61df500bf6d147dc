"""The native kernel's build cache never loads a library another user could have planted.

With ``HOME=/`` (``docker --user``) the cache falls back to ``<tmp>/grpo_monitor-<uid>``, a
name anyone can predict. Here root plays both users: it plants a trojaned kernel (the real
``native_kernel.c`` (with its generated header) plus a constructor that writes a marker file, so the statistics alone
would never give it away) at the exact cache file name, then runs a child that imports
torch and grpo_monitor as root, drops to the victim's uid (``os.setuid`` after the imports:
the interpreter under ``/root`` is unreadable to other uids) and computes token statistics
large enough to take the native path. The marker must not appear, the statistics must equal
a float64 reference, and exactly one warning must name the unsafe path.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

from grpo_monitor.stats.tokens import native_build as _native

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                       reason="plays two users with chown and setuid: needs to run as root"),
    pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                       reason="the C token kernel needs an AVX2 CPU"),
]

VICTIM, ATTACKER = 23456, 12345
B, T = 64, 4096  # 2^18 float32 tokens: the native path

CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *path = getenv("GM_TEST_MARKER");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) { fputs("the planted library ran\n", f); fclose(f); }
}
"""

CHILD = textwrap.dedent(
    """
    import json, os, sys, warnings
    import torch
    from grpo_monitor.stats.tokens import native_build as _native
    from grpo_monitor.stats.tokens import token_metrics, token_sufficient_stats

    uid, B, T = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    g = torch.Generator().manual_seed(0)
    lp = -3 * torch.rand(B, T, generator=g)
    ref = lp + 0.05 + 0.1 * torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) < 0.9).float()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vec = token_sufficient_stats(mask, logprobs=lp, ref_logprobs=ref, compile=True)
    lib = _native._STATE["lib"]
    print(json.dumps({"metrics": token_metrics(vec), "lib": None if lib is None else lib._name,
                      "warnings": [str(w.message) for w in caught], "uid": os.getuid()}))
    """
)


def reference() -> dict[str, float]:
    """Mean k1 and k3 and the valid count of the child's batch, in float64 from the definitions."""
    g = torch.Generator().manual_seed(0)
    lp = -3 * torch.rand(B, T, generator=g)
    ref = lp + 0.05 + 0.1 * torch.randn(B, T, generator=g)
    valid = torch.rand(B, T, generator=g) < 0.9
    u = (ref.double() - lp.double())[valid]
    return {"grpo/kl/k1_mean": (-u).mean().item(), "grpo/kl/k3_mean": (u.exp() - u - 1).mean().item(),
            "grpo/tokens/valid": float(valid.sum())}


@pytest.fixture(scope="module")
def trojan(tmp_path_factory) -> Path:
    """The real kernel plus a marker-writing constructor, built by 'the attacker' (root here)."""
    try:
        cc = _native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler on this machine")
    folder = tmp_path_factory.mktemp("trojan")
    extra = folder / "planted.c"
    extra.write_text(CONSTRUCTOR)
    kernel = folder / "kernel.c"
    kernel.write_text(_native.source_text())  # what the monitor compiles: the generated header, then the kernel
    out = folder / "trojan.so"
    subprocess.run([cc, *_native.FLAGS, "-o", str(out), str(kernel), str(extra)], check=True, timeout=120)
    return out


@pytest.fixture
def machine():
    """A shared temporary folder like /tmp (mode 1777) that the child uses as TMPDIR; removed after."""
    base = Path(tempfile.mkdtemp(prefix="gm-cache-security-", dir="/tmp"))
    base.chmod(0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def plant(trojan: Path, at: Path, owner: int = ATTACKER) -> None:
    """Copy the trojan to ``at``, owned by ``owner``, readable and executable by everybody."""
    shutil.copyfile(trojan, at)
    os.chown(at, owner, owner)
    at.chmod(0o755)


def folder(path: Path, owner: int, mode: int) -> Path:
    """``path`` created with ``owner`` and ``mode`` (chmod after mkdir: the umask does not apply)."""
    path.mkdir()
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def run_victim(base: Path, **env: str) -> dict:
    """The child as the victim: HOME=/ (no writable ~/.cache), TMPDIR=``base``, a marker path for the trojan."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_MONITOR_", "XDG_"))}
    full.update(HOME="/", TMPDIR=str(base), USER="victim", GM_TEST_MARKER=str(base / "MARKER"), **env)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(VICTIM), str(B), str(T)], capture_output=True,
                          text=True, timeout=300, env=full, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["uid"] == VICTIM
    return out


def assert_correct_and_private(out: dict, base: Path) -> Path:
    """The trojan never ran; statistics equal the reference; the library and its folder are the victim's alone."""
    assert not (base / "MARKER").exists(), f"the planted library was loaded (its constructor ran): {out['lib']}"
    for key, want in reference().items():
        assert out["metrics"][key] == pytest.approx(want, rel=1e-5, abs=1e-9), key
    assert out["lib"] is not None, f"the native kernel was not loaded: {out['warnings']}"
    lib = Path(out["lib"])
    for path in (lib, lib.parent):
        st = os.lstat(path)
        assert st.st_uid == VICTIM and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{path} is not private"
    return lib


def grpo_warnings(out: dict) -> list[str]:
    return [w for w in out["warnings"] if w.startswith("grpo-monitor")]


@pytest.mark.parametrize("owner,mode", [(ATTACKER, 0o777), (VICTIM, 0o777), (ATTACKER, 0o755)],
                         ids=["attacker-owned-0777", "own-but-world-writable", "attacker-owned-0755"])
def test_planted_temporary_cache_folder_is_never_read(machine, trojan, owner, mode):
    """A pre-created <tmp>/grpo_monitor-<uid> that is not private: a fresh private build, one warning naming it."""
    unsafe = folder(machine / f"grpo_monitor-{VICTIM}", owner, mode)
    plant(trojan, unsafe / _native.library_name())
    out = run_victim(machine)
    lib = assert_correct_and_private(out, machine)
    assert lib.parent != unsafe and lib.parent.parent == machine
    [warning] = grpo_warnings(out)
    assert str(unsafe) in warning


def test_planted_explicit_cache_dir_is_never_read(machine, trojan):
    """GRPO_MONITOR_CACHE_DIR pointing at another user's writable folder is refused the same way."""
    unsafe = folder(machine / "shared-cache", ATTACKER, 0o777)
    plant(trojan, unsafe / _native.library_name())
    out = run_victim(machine, GRPO_MONITOR_CACHE_DIR=str(unsafe))
    lib = assert_correct_and_private(out, machine)
    assert lib.parent != unsafe
    [warning] = grpo_warnings(out)
    assert str(unsafe) in warning


@pytest.mark.parametrize("kind", ["foreign-file", "symlink"])
def test_planted_library_in_own_private_folder_is_rebuilt_over(machine, trojan, kind):
    """The folder is the victim's and private, the library not theirs (or a symlink): rebuilt in place, one warning."""
    own = folder(machine / f"grpo_monitor-{VICTIM}", VICTIM, 0o700)
    target = own / _native.library_name()
    if kind == "symlink":
        plant(trojan, machine / "elsewhere.so")
        target.symlink_to(machine / "elsewhere.so")
        os.lchown(target, ATTACKER, ATTACKER)
    else:
        plant(trojan, target)
    out = run_victim(machine)
    lib = assert_correct_and_private(out, machine)
    assert lib == target and stat.S_ISREG(os.lstat(target).st_mode)
    assert os.path.exists(machine / "elsewhere.so") or kind != "symlink", "a rename replaces the link, not its target"
    [warning] = grpo_warnings(out)
    assert str(target) in warning


def test_own_private_cache_is_reused_without_a_warning(machine):
    """No false alarm: the first run builds into a private <tmp>/grpo_monitor-<uid>, the second loads it unchanged."""
    first = run_victim(machine)
    lib = assert_correct_and_private(first, machine)
    assert lib.parent == machine / f"grpo_monitor-{VICTIM}" and stat.S_IMODE(os.lstat(lib.parent).st_mode) == 0o700
    before = os.lstat(lib)
    second = run_victim(machine)
    assert Path(second["lib"]) == lib and assert_correct_and_private(second, machine) == lib
    after = os.lstat(lib)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "the cached library was rebuilt"
    assert grpo_warnings(first) == [] and grpo_warnings(second) == []
