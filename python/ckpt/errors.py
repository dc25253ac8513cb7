"""Exceptions. Every failure of the C library becomes an `Error` subclass
chosen by its pinned code, carrying code, message, file, member and offset
(absolute byte offset in `file`, or None when unknown)."""

CODES = {
    -1: "CKPT_E_IO", -2: "CKPT_E_NOMEM", -3: "CKPT_E_TRUNCATED",
    -4: "CKPT_E_FORMAT", -5: "CKPT_E_LIMIT", -6: "CKPT_E_UNSUPPORTED",
    -7: "CKPT_E_UNSAFE", -8: "CKPT_E_CHECKSUM", -9: "CKPT_E_MISMATCH",
    -10: "CKPT_E_INVALID_ARG", -11: "CKPT_E_NOTFOUND",
}


import errno as _errno
import os as _os


class Error(Exception):
    """A libckpt failure. code: the negative CKPT_E_* value; name: its
    name ("CKPT_E_FORMAT"); message; file; member (zip member, shard or
    pickle name, "" if none); offset (int or None)."""

    code = -4

    def __init__(self, message, file="", member="", offset=None, code=None):
        if code is not None:
            self.code = code
        self.message, self.file, self.member, self.offset = message, file, member, offset
        super().__init__(self.__str__())

    @property
    def name(self):
        return CODES.get(self.code, "unknown")

    def __str__(self):
        where = []
        if self.member:
            where.append("member %s" % self.member)
        if self.offset is not None:
            where.append("offset %d" % self.offset)
        loc = " (%s)" % ", ".join(where) if where else ""
        head = "%s: " % self.file if self.file else ""
        return "%s%s%s [%s]" % (head, self.message, loc, self.name)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.file, self.member,
                           self.offset, self.code, getattr(self, "errno", None) or 0))


def _rebuild(cls, message, file, member, offset, code, os_errno=0):
    if os_errno:
        return cls(message, file, member, offset, code, os_errno)
    return cls(message, file, member, offset, code)


class FileError(Error, OSError):
    """CKPT_E_IO: open/read/mmap/write failed. An OSError: where a system
    call failed, errno, strerror and filename are set as Python's own
    OSError sets them (else errno is None), and the class is the one of
    the subclasses below that Python would raise: FileMissingError is a
    FileNotFoundError, FilePermissionError a PermissionError..."""
    code = -1

    def __init__(self, message, file="", member="", offset=None, code=None, os_errno=0):
        super().__init__(message, file, member, offset, code)
        if os_errno:
            self.errno, self.strerror = os_errno, _os.strerror(os_errno)
            self.filename = file


class FileMissingError(FileError, FileNotFoundError):
    """ENOENT: the path does not exist."""


class FilePermissionError(FileError, PermissionError):
    """EACCES, EPERM: permission denied."""


class FileIsADirectoryError(FileError, IsADirectoryError):
    """EISDIR: a directory where a file was expected."""


class FileNotADirectoryError(FileError, NotADirectoryError):
    """ENOTDIR: a path component is not a directory."""


_BY_ERRNO = {_errno.ENOENT: FileMissingError, _errno.EACCES: FilePermissionError,
             _errno.EPERM: FilePermissionError, _errno.EISDIR: FileIsADirectoryError,
             _errno.ENOTDIR: FileNotADirectoryError}


class OutOfMemoryError(Error, MemoryError):
    code = -2


class FormatError(Error):
    """CKPT_E_FORMAT: malformed input."""
    code = -4


class TruncatedError(FormatError):
    code = -3


class LimitError(Error):
    code = -5


class UnsupportedError(Error):
    code = -6


class UnsafeError(Error):
    """CKPT_E_UNSAFE: loading the file with torch.load would run code.
    `report` is the ckpt.ScanReport that decided it (None when raised by
    the C library directly)."""
    code = -7
    report = None


class ChecksumError(Error):
    code = -8


class MismatchError(Error):
    code = -9


class InvalidArgumentError(Error, ValueError):
    code = -10


class DeviceError(InvalidArgumentError, RuntimeError):
    """A device argument (map_location, device) this torch cannot place
    tensors on: CUDA on a CPU-only build or machine, a CUDA index past
    torch.cuda.device_count(), a device type it does not know or has no
    backend for. Also the RuntimeError torch.load raises for it."""


class NotFoundError(Error, LookupError):
    code = -11


class PathTypeError(InvalidArgumentError, TypeError):
    """A path argument that is no path (a file object, a buffer): also a
    TypeError, as os.fspath raises."""


class KeyMismatchError(MismatchError):
    """load_state_dict refused to load: `report` is the full MatchReport
    (matched, missing, unexpected, shape and dtype mismatches). Nothing was
    copied into the module."""

    def __init__(self, report, file=""):
        self.report = report
        super().__init__(report.summary(), file)

    def __reduce__(self):
        return (KeyMismatchError, (self.report, self.file))


_BY_CODE = {c.code: c for c in (FileError, OutOfMemoryError, TruncatedError,
                                 FormatError, LimitError, UnsupportedError,
                                 UnsafeError, ChecksumError, MismatchError,
                                 InvalidArgumentError, NotFoundError)}


def from_code(code, message, file="", member="", offset=None, os_errno=0):
    if code == FileError.code:
        cls = _BY_ERRNO.get(os_errno, FileError)
        return cls(message, file, member, offset, code, os_errno)
    cls = _BY_CODE.get(code, Error)
    return cls(message, file, member, offset, code)


def path_arg(path, func):
    """path, or PathTypeError when it is no str, bytes or os.PathLike:
    ckpt reads files by path (pread, its own mapping), so a file object
    or an in-memory buffer is named as not accepted, not a bare TypeError
    from os.fspath."""
    if isinstance(path, (str, bytes, _os.PathLike)):
        return path
    name = getattr(path, "name", None)
    hint = (" (this file object is open on %r: pass that path)" % name
            if isinstance(name, (str, bytes)) and _os.path.isfile(name) else
            " (write the bytes to a file first)")
    raise PathTypeError("%s takes a path (str, bytes or os.PathLike) to a checkpoint file or "
                        "model folder, not a %s.%s object: file objects and in-memory buffers "
                        "are not read%s" % (func, type(path).__module__,
                                             type(path).__qualname__, hint))
