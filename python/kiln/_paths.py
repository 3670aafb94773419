"""Where the package's libkiln and `kiln` command are: the copies the wheel
ships inside the package, or ``KILN_LIBRARY`` / ``KILN_EXE`` (a build tree)."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
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


# <prefix>/lib/python3.X/site-packages/nvidia: the layout libkiln searches
# under KILN_PYTHON_PREFIX (common/gpu_libs.c).
_NVIDIA_DIR = re.compile(r"^(?P<prefix>.+)/lib/python3[^/]*/site-packages/nvidia/?$")


def _nvidia_wheels_prefix() -> str | None:
    """The prefix whose site-packages holds the ``nvidia`` namespace package
    (NVIDIA's wheels: nvidia-cuda-nvrtc, nvidia-nccl-cu13...) as this
    interpreter imports it, which need not be sys.prefix's: a venv that reaches
    torch's site-packages through a .pth file, or PYTHONPATH. Found without
    importing torch or nvidia."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):  # ValueError: a module without __spec__
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if spec.origin and not locations:
        locations = [os.path.dirname(spec.origin)]
    for loc in locations:  # in sys.path order, as `import nvidia.x` would search
        m = _NVIDIA_DIR.match(loc)
        if m:
            return m.group("prefix")
    return None


def set_python_prefix() -> None:
    """NVRTC and NCCL are taken from NVIDIA's wheels of this interpreter
    (docs/install.md): KILN_PYTHON_PREFIX is set, unless the caller named one,
    to the prefix of the site-packages the ``nvidia`` package is imported
    from, else sys.prefix."""
    if "KILN_PYTHON_PREFIX" in os.environ:
        return
    os.environ["KILN_PYTHON_PREFIX"] = _nvidia_wheels_prefix() or sys.prefix
