# SPDX-License-Identifier: Apache-2.0
"""The binding's exceptions: KvadmitError and one subclass per errno the
library returns, error() to pick one for a return code, and the mapping of
an argument cffi cannot convert to the errno the library would answer."""
import errno as _errno

from ._lib import ffi, lib


class KvadmitError(Exception):
    """A kvadmit call returned a negative errno.

    errno: the positive errno value; errno_name: its symbol ("ENOENT");
    strerror: kva_strerror()'s text; call: the C function that failed."""

    def __init__(self, err, call=""):
        err = -err if err < 0 else err
        self.errno = err
        self.errno_name = _errno.errorcode.get(err, f"E{err}")
        self.strerror = ffi.string(lib.kva_strerror(-err)).decode("utf-8", "replace")
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.errno_name}: {self.strerror}")


class InvalidArgument(KvadmitError, ValueError):
    """-EINVAL: NULL or malformed argument, bad config, unsorted manifest ..."""


class InvalidType(InvalidArgument, TypeError):
    """-EINVAL for an argument of the wrong type (a str where an int goes):
    also a TypeError."""


class InvalidRange(InvalidArgument, OverflowError):
    """-EINVAL for an integer that does not fit its C field (negative, or
    past 2**32 / 2**64): also an OverflowError (and a ValueError)."""


class NotFound(KvadmitError, LookupError):
    """-ENOENT: unknown or ended handle / token."""


class Stale(KvadmitError):
    """-ESTALE: token of a lookup or copy attempt that is no longer current."""


class AlreadyDone(KvadmitError):
    """-EALREADY: double finish, rank reported twice, cancel already requested."""


class Busy(KvadmitError):
    """-EBUSY: the request is in a state that does not allow the call now."""


class NoSpace(KvadmitError):
    """-ENOSPC: grow found no free credits (nothing changed)."""


class OutOfRange(KvadmitError, ValueError):
    """-ERANGE: a number out of range (rank >= world_size, too many pages ...)."""


class OutOfMemory(KvadmitError, MemoryError):
    """-ENOMEM: an allocation failed; nothing changed, the engine stays usable."""


class NoDevice(KvadmitError):
    """-ENODEV: (importers) no device."""


class TimedOut(KvadmitError, TimeoutError):
    """-ETIMEDOUT: wait_idle's timeout passed."""


class TryAgain(KvadmitError):
    """-EAGAIN: (importers) threads could not be started."""


class NotSupported(KvadmitError):
    """-ENOTSUP: built without the feature."""


_ERRORS = {_errno.EINVAL: InvalidArgument, _errno.ENOENT: NotFound, _errno.ESTALE: Stale,
           _errno.EALREADY: AlreadyDone, _errno.EBUSY: Busy, _errno.ENOSPC: NoSpace,
           _errno.ERANGE: OutOfRange, _errno.ENOMEM: OutOfMemory, _errno.ENODEV: NoDevice,
           _errno.ETIMEDOUT: TimedOut, _errno.EAGAIN: TryAgain, _errno.ENOTSUP: NotSupported}


def error(rc, call=""):
    """The exception for a negative return code rc of `call`."""
    return _ERRORS.get(-rc, KvadmitError)(rc, call)


def strerror(err):
    """kva_strerror(err): the text for a (negative) errno value."""
    return ffi.string(lib.kva_strerror(err)).decode("utf-8", "replace")


# Errors cffi raises when an argument does not fit its C type (a negative
# count, a number too large for the field, a wrong type, a read-only buffer
# where a writable one is needed).
CONVERSION = (OverflowError, TypeError, ValueError, BufferError)


def arg_error(call, exc, err=-22):
    """The KvadmitError for an argument cffi could not convert: InvalidArgument
    (what the library answers for a malformed argument), or `err` where the
    library answers that argument's range check with another errno. A wrong
    type raises InvalidType (a TypeError too), an integer out of its field's
    range InvalidRange (an OverflowError too)."""
    if err == -22:
        if isinstance(exc, TypeError):
            return InvalidType(err, f"{call}: {exc}")
        if isinstance(exc, OverflowError):
            return InvalidRange(err, f"{call}: {exc}")
    return error(err, f"{call}: {exc}")
