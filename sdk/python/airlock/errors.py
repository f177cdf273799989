"""Typed exceptions of the Airlock SDK.

Every exception carries the control API's stable error ``code``, its
``message``, the HTTP ``status`` and the ``request_id`` the appliance logged
the request under (quote it when you report a problem).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class AirlockError(Exception):
    """An error of the control API or of talking to it."""

    def __init__(self, message: str, code: str = "internal", status: int = 0,
                 request_id: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        rid = f", request {self.request_id}" if self.request_id else ""
        return f"{self.message} ({self.code}{rid})"


class Invalid(AirlockError):
    """Bad input: the appliance refused the request as given (400)."""


class Denied(AirlockError):
    """Refused: a missing or wrong token (401) or a forbidden action (403)."""


class NotFound(AirlockError):
    """No such sandbox, process, file, policy or approval (404)."""


class Conflict(AirlockError):
    """The state changed under the request (409)."""


class QuotaExceeded(AirlockError):
    """A limit is reached, e.g. the appliance's sandbox maximum (429)."""


class NotSupported(AirlockError):
    """The appliance (or this SDK) cannot do it (501)."""


class Unavailable(AirlockError):
    """A component of the appliance is missing, or it cannot be reached (503)."""


class Timeout(AirlockError):
    """A command ran past its timeout, or the appliance did not answer in time.

    ``result`` holds what the command printed before it was stopped, when
    the timeout was the command's (otherwise ``None``).
    """

    def __init__(self, message: str, code: str = "timeout", status: int = 0,
                 request_id: str = "", result: Optional[Any] = None) -> None:
        super().__init__(message, code, status, request_id)
        self.result = result


_BY_CODE: Dict[str, Type[AirlockError]] = {
    "invalid": Invalid,
    "unauthorized": Denied,
    "forbidden": Denied,
    "not_found": NotFound,
    "conflict": Conflict,
    "quota_exceeded": QuotaExceeded,
    "unsupported": NotSupported,
    "unavailable": Unavailable,
    "timeout": Timeout,
}

_BY_STATUS: Dict[int, Type[AirlockError]] = {
    400: Invalid, 401: Denied, 403: Denied, 404: NotFound, 409: Conflict,
    429: QuotaExceeded, 501: NotSupported, 503: Unavailable, 504: Timeout,
}


def from_api(status: int, code: str, message: str, request_id: str) -> AirlockError:
    """Build the typed exception for an API error body."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or AirlockError
    return cls(message, code or "internal", status, request_id)
