"""A sandbox's egress decisions, from the appliance's audit log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._http import seg

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass
class Event:
    """One audit event (docs/events.md); ``raw`` has every field."""

    seq: int
    time: str
    kind: str  # dns | flow | http | drop | exec | approval | lifecycle | ...
    verdict: str  # allow | deny | ask | audit, "" when the kind has none
    rule: str
    category: str
    reason: str
    destination: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "Event":
        return cls(seq=d.get("seq", 0), time=d.get("time", ""), kind=d.get("kind", ""),
                   verdict=d.get("verdict", ""), rule=d.get("rule", ""), category=d.get("category", ""),
                   reason=d.get("reason", ""), destination=destination(d), raw=d)


def destination(d: Dict[str, Any]) -> str:
    """Where an event went: a DNS name, METHOD scheme://host/path, or host:port."""
    if d.get("http"):
        h = d["http"]
        return f"{h.get('method', '')} {h.get('scheme', 'https')}://{h.get('host', '')}{h.get('path', '')}".strip()
    if d.get("dns"):
        return d["dns"].get("qname", "")
    if d.get("flow"):
        f = d["flow"]
        return f.get("host") or f.get("sni") or f.get("orig_dst", "")
    if d.get("drop"):
        f = d["drop"]
        return f"{f.get('dest', '')}:{f['port']}" if f.get("port") else f.get("dest", "")
    if d.get("approval"):
        return d["approval"].get("destination", "")
    return ""


class Egress:
    """``sbx.egress``: what the sandbox tried to reach and what was decided."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox

    def events(self, kind: Optional[str] = None, verdict: Optional[str] = None,
               limit: Optional[int] = None, since: Optional[str] = None) -> List[Event]:
        """Audit events of this sandbox, oldest first; ``kind`` (dns, flow,
        http, drop, exec, approval, ...) and ``verdict`` (allow, deny, ask,
        audit) filter them, ``limit`` keeps the newest N, ``since`` is an
        RFC 3339 time."""
        q = {"sandbox": self._sbx.id, "kind": kind, "verdict": verdict, "since": since,
             "limit": limit, "newest": True if limit else None}
        out = []
        for line in self._sbx._t.request("GET", "/logs", q).lines():
            d = json.loads(line)
            if d.get("error"):
                from . import errors
                e = d["error"]
                raise errors.from_api(0, e.get("code", ""), e.get("message", ""), "")
            out.append(Event._from(d))
        return out

    def denials(self) -> List[Event]:
        """Every refused attempt (verdict deny), oldest first, with rule and reason."""
        return self.events(verdict="deny")

    def summary(self) -> Dict[str, Any]:
        """The egress summary: categories, denied destinations, DNS names, drops."""
        return self._sbx._t.request("GET", f"/sandboxes/{seg(self._sbx.id)}/summary").json()
