"""Where a run happened and what it held in memory: package versions, CPU, RSS, drafter weights."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
from importlib import metadata
from typing import Any

import torch

from voicespec.lm.linear import cpu_kernel
from voicespec.paths import REPO_ROOT

PACKAGES = ("voicespec", "torch", "transformers", "numpy", "websockets", "matplotlib")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git() -> dict[str, Any] | None:
    """The source commit and whether the tree had local changes (None outside a git checkout)."""
    root = REPO_ROOT
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode:
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "cpu_linear": cpu_kernel(),  # the kernel of a verify pass's products on the CPU (voicespec.lm.linear)
        "cuda": torch.cuda.is_available(),
        "packages": {name: _version(name) for name in PACKAGES},
        "git": _git(),
    }


def open_fds() -> int:
    """File descriptors this process holds (Linux /proc)."""
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    """Resident memory now (Linux /proc; elsewhere the peak, the best portable figure)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB elsewhere


def weights_mb(module: Any) -> float:
    """Parameter and buffer bytes of a torch module (0 for drafters without weights)."""
    if not isinstance(module, torch.nn.Module):
        return 0.0
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20
