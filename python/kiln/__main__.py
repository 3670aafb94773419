"""`python -m kiln` and the `kiln` console script: the kiln command the
package ships (the same CLI as a source build's), run in place of Python."""

from __future__ import annotations

import os
import sys

from kiln._paths import executable_path, set_python_prefix


def main() -> None:
    set_python_prefix()
    exe = executable_path()
    os.execv(exe, ["kiln", *sys.argv[1:]])


if __name__ == "__main__":
    main()
