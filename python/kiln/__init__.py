"""kiln: fused CUDA kernels built ahead of time into a content-addressed cache.

``import kiln`` needs no torch: ``kiln.build``, ``kiln.Cache``,
``kiln.probe``, ``kiln.doctor`` and the ``KilnError`` exceptions. The ops on
torch tensors and the one-rank build over torch.distributed are in
``kiln.torch``. docs/python.md has the whole API.
"""

from kiln.api import (
    BuildItem,
    BuildReport,
    Cache,
    Record,
    build,
    doctor,
    probe,
    version,
)
from kiln.errors import (
    KilnCompileError,
    KilnCorrupt,
    KilnDatabaseError,
    KilnDriverError,
    KilnError,
    KilnExists,
    KilnInternalError,
    KilnInvalidArgument,
    KilnIOError,
    KilnLocked,
    KilnMismatchError,
    KilnNoNVRTC,
    KilnNoSpace,
    KilnNotFound,
    KilnOutOfMemory,
    KilnPeerError,
    KilnPermissionError,
    KilnRemoteError,
    KilnTimeout,
    KilnUnsupported,
)

__version__ = version()

__all__ = [
    "BuildItem",
    "BuildReport",
    "Cache",
    "Record",
    "build",
    "doctor",
    "probe",
    "version",
    "KilnError",
    "KilnCompileError",
    "KilnCorrupt",
    "KilnDatabaseError",
    "KilnDriverError",
    "KilnExists",
    "KilnInternalError",
    "KilnInvalidArgument",
    "KilnIOError",
    "KilnLocked",
    "KilnMismatchError",
    "KilnNoNVRTC",
    "KilnNoSpace",
    "KilnNotFound",
    "KilnOutOfMemory",
    "KilnPeerError",
    "KilnPermissionError",
    "KilnRemoteError",
    "KilnTimeout",
    "KilnUnsupported",
]
