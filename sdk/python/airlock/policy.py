"""Ask the appliance how a policy decides a request (``airlock policy explain``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ._http import Transport


@dataclass
class Explanation:
    """A verdict and the rules considered on the way to it."""

    policy: str
    request: str
    action: str  # allow | deny | ask | audit
    category: str
    rule: str
    reason: str
    would_deny: bool = False
    considered: List[Tuple[str, str]] = field(default_factory=list)  # (rule, outcome)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def allowed(self) -> bool:
        """True when the request would pass (allow, or audit)."""
        return self.action in ("allow", "audit")


def explain(url: str, method: str = "GET", policy: Optional[str] = None,
            transport: Optional[Transport] = None) -> Explanation:
    """How ``policy`` (default: the appliance's default policy) decides
    ``METHOD url``. ``url`` may also be a whole request line as
    ``airlock policy explain`` takes it: ``"dns NAME TXT"``,
    ``"connect host:443"``. Nothing is sent to the destination."""
    t = transport or Transport()
    line = url if " " in url.strip() else f"{method.upper()} {url}"
    d = t.request("GET", "/policies/explain", {"policy": policy, "request": line}).json()
    return Explanation(policy=d.get("policy", ""), request=d.get("request", ""), action=d.get("action", ""),
                       category=d.get("category", ""), rule=d.get("rule", ""), reason=d.get("reason", ""),
                       would_deny=d.get("would_deny", False),
                       considered=[(c.get("rule", ""), c.get("outcome", "")) for c in d.get("considered") or []],
                       raw=d)
