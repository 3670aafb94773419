"""kiln's status codes as exceptions.

Every failing call raises a ``KilnError`` subclass chosen by its
``kiln_status`` (include/kiln/status.h). The message is kiln's own detail
(``kiln_last_error()``); ``status`` is the constant's name, e.g.
``"KILN_EINVAL"``, and ``code`` its number.
"""

from __future__ import annotations


class KilnError(Exception):
    """A kiln call failed. ``status``: e.g. "KILN_ECOMPILE"; ``code``: its number."""

    status = "KILN_EINTERNAL"
    code = -19

    def __init__(self, message: str, status: str | None = None, code: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class KilnInvalidArgument(KilnError, ValueError):
    """Invalid argument or input (KILN_EINVAL), e.g. a token id outside the vocabulary."""


class KilnOutOfMemory(KilnError, MemoryError):
    """KILN_ENOMEM."""


class KilnIOError(KilnError, OSError):
    """A file system error (KILN_EIO)."""


class KilnNotFound(KilnError, LookupError):
    """No such record, unit, target or file (KILN_ENOTFOUND)."""


class KilnExists(KilnError):
    """KILN_EEXISTS."""


class KilnCorrupt(KilnError):
    """A digest mismatch, truncated blob or malformed record (KILN_ECORRUPT)."""


class KilnPermissionError(KilnError, PermissionError):
    """Unsafe ownership or permissions (KILN_EPERM)."""


class KilnNoSpace(KilnError, OSError):
    """No space left on the device (KILN_ENOSPC)."""


class KilnCompileError(KilnError):
    """A kernel failed to compile (KILN_ECOMPILE); the message names unit, target and log."""


class KilnNoNVRTC(KilnError):
    """NVRTC could not be loaded (KILN_ENONVRTC)."""


class KilnDatabaseError(KilnError):
    """The sqlite index failed (KILN_EDB)."""


class KilnUnsupported(KilnError):
    """An unsupported target or feature (KILN_EUNSUPPORTED)."""


class KilnLocked(KilnError):
    """Held by another process (KILN_ELOCKED)."""


class KilnTimeout(KilnError, TimeoutError):
    """A bounded wait ran out (KILN_ETIMEDOUT)."""


class KilnPeerError(KilnError):
    """A peer rank failed or went silent (KILN_EPEER)."""


class KilnMismatchError(KilnError):
    """Ranks or cache layers disagree (KILN_EMISMATCH)."""


class KilnDriverError(KilnError):
    """The CUDA driver failed (KILN_EDRIVER)."""


class KilnRemoteError(KilnError):
    """The remote cache failed (KILN_EREMOTE)."""


class KilnInternalError(KilnError):
    """A bug in kiln (KILN_EINTERNAL)."""


BY_CODE: dict[int, type[KilnError]] = {
    -1: KilnInvalidArgument,
    -2: KilnOutOfMemory,
    -3: KilnIOError,
    -4: KilnNotFound,
    -5: KilnExists,
    -6: KilnCorrupt,
    -7: KilnPermissionError,
    -8: KilnNoSpace,
    -9: KilnCompileError,
    -10: KilnNoNVRTC,
    -11: KilnDatabaseError,
    -12: KilnUnsupported,
    -13: KilnLocked,
    -14: KilnTimeout,
    -15: KilnPeerError,
    -16: KilnMismatchError,
    -17: KilnDriverError,
    -18: KilnRemoteError,
    -19: KilnInternalError,
}


def error_for(code: int, message: str, status: str) -> KilnError:
    """The exception for a failed kiln_status (KilnError itself for a code this
    package does not know)."""
    cls = BY_CODE.get(code, KilnError)
    return cls(message or status, status=status, code=code)
