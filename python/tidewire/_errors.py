"""Exceptions of the pythonic API: one class per native result code, all under TidewireError."""

from typing import Any, Dict, Optional, Tuple, Type

from . import _ffi

__all__ = [
    "TidewireError",
    "InvalidArgument",
    "NullArgument",
    "TooManyRequests",
    "AddressNotRegistered",
    "AddressOverlapped",
    "InvalidId",
    "UnknownSegment",
    "Busy",
    "TransferTimeout",
    "Rejected",
    "SocketError",
    "ProtocolError",
    "MetadataError",
    "Unsupported",
    "BufferTooSmall",
    "Shutdown",
    "InternalError",
    "PanicError",
    "CallbackError",
    "check",
    "error_for",
]


class TidewireError(Exception):
    """A failed tidewire call: ``code`` is the native ``TW_ERR_*`` number, ``message`` the
    detail (the library's last error message of the calling thread)."""

    code: Optional[int] = None  # every instance has its own (``__init__``)

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    @property
    def name(self) -> str:
        """The code's name, e.g. ``"TW_ERR_TIMEOUT"``."""
        if self.code is None:
            return "TW_ERR(None)"
        try:
            return _ffi.result_name(self.code)
        except ImportError:
            return f"TW_ERR({self.code})"

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}" if self.message else self.name

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.code, self.message))


class InvalidArgument(TidewireError, ValueError):
    """A parameter is out of its domain (zero length, bad opcode, ...)."""


class NullArgument(TidewireError, ValueError):
    """A required pointer was NULL."""


class TooManyRequests(TidewireError):
    """More requests than the batch holds."""


class AddressNotRegistered(TidewireError):
    """An address range is not inside one registered region."""


class AddressOverlapped(TidewireError):
    """A registration partially overlaps an existing one."""


class InvalidId(TidewireError):
    """A batch or scatter id that is unknown, stale or freed."""


class UnknownSegment(TidewireError):
    """A segment that is not open or cannot be reached."""


class Busy(TidewireError):
    """Work is still in flight."""


class TransferTimeout(TidewireError, TimeoutError):
    """A bounded wait ran out (the work continues)."""

    def __init__(self, code: int, message: str = "") -> None:
        TidewireError.__init__(self, code, message)

    def __str__(self) -> str:
        return TidewireError.__str__(self)


class Rejected(TidewireError):
    """The peer refused the address range."""


class SocketError(TidewireError, ConnectionError):
    """Connect, reset or I/O timeout on a socket."""

    def __init__(self, code: int, message: str = "") -> None:
        TidewireError.__init__(self, code, message)

    def __str__(self) -> str:
        return TidewireError.__str__(self)


class ProtocolError(TidewireError):
    """The peer broke the protocol."""


class MetadataError(TidewireError):
    """A descriptor could not be fetched, decoded or published."""


class Unsupported(TidewireError):
    """Not available in this build or on this host."""


class BufferTooSmall(TidewireError):
    """An output buffer is too small."""


class Shutdown(TidewireError):
    """The engine is shutting down (or was closed)."""


class InternalError(TidewireError):
    """Internal failure."""


class PanicError(TidewireError):
    """A panic was caught at the library boundary (a bug)."""


class CallbackError(TidewireError):
    """A scatter fragment callback raised; ``__cause__`` is the first exception, ``results``
    the per-fragment results."""

    results: "list[int]" = []


_BY_CODE: Dict[int, Type[TidewireError]] = {
    _ffi.TW_ERR_INVALID_ARGUMENT: InvalidArgument,
    _ffi.TW_ERR_NULL_ARGUMENT: NullArgument,
    _ffi.TW_ERR_TOO_MANY_REQUESTS: TooManyRequests,
    _ffi.TW_ERR_ADDRESS_NOT_REGISTERED: AddressNotRegistered,
    _ffi.TW_ERR_ADDRESS_OVERLAPPED: AddressOverlapped,
    _ffi.TW_ERR_INVALID_ID: InvalidId,
    _ffi.TW_ERR_UNKNOWN_SEGMENT: UnknownSegment,
    _ffi.TW_ERR_BUSY: Busy,
    _ffi.TW_ERR_TIMEOUT: TransferTimeout,
    _ffi.TW_ERR_REJECTED: Rejected,
    _ffi.TW_ERR_SOCKET: SocketError,
    _ffi.TW_ERR_PROTOCOL: ProtocolError,
    _ffi.TW_ERR_METADATA: MetadataError,
    _ffi.TW_ERR_UNSUPPORTED: Unsupported,
    _ffi.TW_ERR_BUFFER_TOO_SMALL: BufferTooSmall,
    _ffi.TW_ERR_SHUTDOWN: Shutdown,
    _ffi.TW_ERR_INTERNAL: InternalError,
    _ffi.TW_ERR_PANIC: PanicError,
}


def error_for(code: int, message: Optional[str] = None) -> TidewireError:
    """The exception for a native result code; ``message`` defaults to the thread's last error."""
    if message is None:
        message = _ffi.last_error_message()
    return _BY_CODE.get(code, TidewireError)(code, message)


def check(code: int) -> None:
    """Raises the matching exception when ``code`` is not ``TW_OK``."""
    if code != 0:
        raise error_for(code)
