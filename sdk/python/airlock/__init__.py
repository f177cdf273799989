"""Airlock's Python SDK: sandboxes whose egress an Airlock appliance decides.

    from airlock import Sandbox
    with Sandbox.create(policy="coding-agent") as sbx:
        print(sbx.commands.run("echo hi").stdout)

Standard library only. The appliance is found through ``AIRLOCK_URL``
(``unix:///path.sock`` or ``https://host:port`` with ``AIRLOCK_TOKEN``), else
the unix socket ``AIRLOCK_SOCKET``, else ``/run/airlock/airlock.sock``.
"""

from . import policy
from ._http import DEFAULT_SOCKET, Transport
from .commands import CommandHandle, CommandResult, ProcessInfo
from .egress import Event
from .errors import (AirlockError, Conflict, Denied, Invalid, NotFound, NotSupported, QuotaExceeded, Timeout,
                     Unavailable)
from .files import FileInfo
from .sandbox import STATES, Approval, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "STATES", "CommandResult", "CommandHandle", "ProcessInfo", "FileInfo", "Event", "Approval",
    "Transport", "DEFAULT_SOCKET", "policy",
    "AirlockError", "Invalid", "Denied", "NotFound", "Conflict", "QuotaExceeded", "NotSupported",
    "Timeout", "Unavailable",
]
