"""Where the package's libkiln and `kiln` command are: the copies the wheel
ships inside the package, or ``KILN_LIBRARY`` / ``KILN_EXE`` (a build tree)."""

from __future__ import annotations

import glob
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _first(patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(_HERE, pattern)))
        if found:
            return found[0]
    return None


def library_path() -> str:
    """The libkiln to load: ``KILN_LIBRARY``, else the package's own copy."""
    path = os.environ.get("KILN_LIBRARY") or _first(
        ("lib/libkiln.so", "lib*/libkiln.so", "lib*/libkiln.so.*")
    )
    if not path:
        raise ImportError(
            "kiln: no libkiln inside the package (install it with `pip install .` from the "
            "kiln repository) and KILN_LIBRARY is not set"
        )
    return path


def executable_path() -> str:
    """The `kiln` command: ``KILN_EXE``, else the package's own copy."""
    path = os.environ.get("KILN_EXE") or _first(("bin/kiln",))
    if not path:
        raise FileNotFoundError(
            "kiln: no `kiln` command inside the package and KILN_EXE is not set"
        )
    return path


def set_python_prefix() -> None:
    """NVRTC and NCCL are taken from NVIDIA's wheels of this interpreter
    (docs/install.md) unless the caller named another prefix."""
    os.environ.setdefault("KILN_PYTHON_PREFIX", sys.prefix)
