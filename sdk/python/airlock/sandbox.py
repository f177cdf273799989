"""Sandboxes: create one, use it, destroy it."""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import errors
from ._http import Transport, seg
from .commands import Commands
from .egress import Egress
from .files import Files


@dataclass
class Approval:
    """An access request or held request and its state."""

    id: str
    sandbox: str
    destination: str
    state: str  # held | approved | denied | expired
    rule: str = ""
    decided_by: str = ""
    reason: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def status(self) -> str:
        """pending, granted or denied (expired counts as denied)."""
        return {"held": "pending", "approved": "granted"}.get(self.state, "denied")

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "Approval":
        return cls(id=d.get("id", ""), sandbox=d.get("sandbox", ""), destination=d.get("destination", ""),
                   state=d.get("state", ""), rule=d.get("rule", ""), decided_by=d.get("decided_by", ""),
                   reason=d.get("reason", ""), raw=d)


# A sandbox's states, in lifecycle order (docs/api.md, "Sandbox states").
STATES = ("creating", "running", "paused", "ending", "ended")

# What an older appliance called a state that has another name now.
_LEGACY_STATES = {"destroying": "ending", "destroy-failed": "ending"}


def _with_state(info: Dict[str, Any]) -> Dict[str, Any]:
    """info with an older appliance's state name replaced by today's."""
    s = info.get("state")
    if s in _LEGACY_STATES:
        info = dict(info, state=_LEGACY_STATES[s])
    return info


class Sandbox:
    """A sandbox of an Airlock appliance. Use ``Sandbox.create(...)`` as a
    context manager: the sandbox is destroyed when the block ends."""

    def __init__(self, info: Dict[str, Any], transport: Transport) -> None:
        self._t = transport
        self.info = _with_state(info)
        self.id: str = info["id"]
        self.commands = Commands(self)
        self.files = Files(self)
        self.egress = Egress(self)

    @classmethod
    def create(cls, image: Optional[str] = None, template: Optional[str] = None,
               policy: Optional[str] = None, workspace: Optional[str] = None,
               secrets: Optional[Dict[str, str]] = None, env: Optional[Dict[str, str]] = None,
               timeout: Optional[float] = None, lifetime: Optional[float] = None,
               workspace_git: Optional[str] = None, setup: Optional[Sequence[Sequence[str]]] = None,
               labels: Optional[Dict[str, str]] = None,
               lockfiles: Optional[Sequence[Union[str, "os.PathLike[str]", Tuple[str, str]]]] = None,
               url: Optional[str] = None,
               token: Optional[str] = None, request_timeout: float = 300.0,
               ca_file: Optional[str] = None, fingerprint: Optional[str] = None) -> "Sandbox":
        """Create a sandbox and return it when it is ready to run commands.

        ``image`` and ``policy`` default to the appliance's. ``workspace`` is
        a host directory mounted at /workspace (``workspace_git`` an https
        URL cloned there instead). ``secrets`` are held by the appliance for
        injection by its proxy and never enter the sandbox. ``timeout``
        (seconds) is the default bound of each command, ``lifetime`` of the
        sandbox. ``url``/``token`` choose the appliance and
        ``ca_file``/``fingerprint`` how its TLS certificate is checked
        (default: the environment, see ``Transport``). ``template`` names a
        template version (``NAME`` for the newest, ``NAME:vN``; ``airlock
        template ls``) instead of ``image``; a warm pool of it makes the
        create a claim.

        ``lockfiles`` restrict the sandbox's package installs to the
        versions they list, with their digests: each a path to read or a
        ``(name, content)`` pair; package-lock.json, requirements.txt with
        --hash, uv.lock or poetry.lock (the format is told by the name,
        else by the content). A lockfile that does not read raises
        ``Invalid`` naming the file and the line.
        """
        req: Dict[str, Any] = {"image": image, "template": template, "policy": policy, "workspace": workspace,
                               "secrets": secrets,
                               "env": env, "workspace_git": workspace_git, "labels": labels,
                               "setup": [list(c) for c in setup] if setup else None,
                               "exec_timeout": None if timeout is None else f"{timeout:.3f}s",
                               "lifetime": None if lifetime is None else f"{lifetime:.3f}s",
                               "lockfiles": [_lockfile(f) for f in lockfiles] if lockfiles else None}
        t = Transport(url, token, timeout=request_timeout, ca_file=ca_file, fingerprint=fingerprint)
        info = t.request("POST", "/sandboxes", body={k: v for k, v in req.items() if v is not None}).json()
        return cls(info, t)

    @classmethod
    def connect(cls, sandbox_id: str, url: Optional[str] = None, token: Optional[str] = None,
                ca_file: Optional[str] = None, fingerprint: Optional[str] = None) -> "Sandbox":
        """A handle of an existing sandbox (raises ``NotFound``)."""
        t = Transport(url, token, ca_file=ca_file, fingerprint=fingerprint)
        return cls(t.request("GET", f"/sandboxes/{seg(sandbox_id)}").json(), t)

    @staticmethod
    def list(url: Optional[str] = None, token: Optional[str] = None, ca_file: Optional[str] = None,
             fingerprint: Optional[str] = None) -> List[Dict[str, Any]]:
        """The caller's sandboxes (an admin's, and the unix socket's: all),
        as the API describes them."""
        t = Transport(url, token, ca_file=ca_file, fingerprint=fingerprint)
        return [_with_state(d) for d in t.request("GET", "/sandboxes").json() or []]

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def refresh(self) -> Dict[str, Any]:
        """Fetch the sandbox's description again (state, warnings, ...)."""
        self.info = _with_state(self._t.request("GET", f"/sandboxes/{seg(self.id)}").json())
        return self.info

    @property
    def state(self) -> str:
        """The state as last fetched (``refresh()``; ``pause``, ``resume``,
        ``reset`` and ``kill`` update it): one of ``STATES`` — creating,
        running, paused, ending, ended."""
        return str(self.info.get("state", ""))

    def pause(self) -> None:
        """Stop the sandbox: its network is cut in the kernel and its
        processes stopped; commands raise ``Conflict`` until ``resume()``."""
        self._t.request("POST", f"/sandboxes/{seg(self.id)}/pause").read()
        self.refresh()

    def resume(self) -> None:
        """Continue a paused sandbox and restore its network."""
        self._t.request("POST", f"/sandboxes/{seg(self.id)}/resume").read()
        self.refresh()

    def reset(self) -> Dict[str, Any]:
        """Return the sandbox to the state it was created in (a new
        container, the same address and policy; files written are gone).
        Returns the reset record: old and new container, image ID, time."""
        res: Dict[str, Any] = self._t.request("POST", f"/sandboxes/{seg(self.id)}/reset").json()
        self.info = _with_state(res.get("sandbox") or self.info)
        return res

    def kill(self) -> None:
        """Destroy the sandbox (a sandbox already gone is not an error);
        its state is then ``ended``."""
        try:
            self._t.request("DELETE", f"/sandboxes/{seg(self.id)}").read()
        except errors.NotFound:
            pass
        finally:
            self._t.close()
        self.info = dict(self.info, state="ended")

    def report(self, html: bool = True) -> str:
        """The review report of this sandbox (``airlock report``): one
        self-contained HTML page, or Markdown with ``html=False``."""
        q = {"format": "html" if html else "markdown"}
        return self._t.request("GET", f"/sandboxes/{seg(self.id)}/report", q).read().decode("utf-8", "replace")

    def request_access(self, destination: str, reason: str = "") -> Approval:
        """Ask a person for access to ``destination`` (``airlock approve``);
        the returned approval is pending until they decide."""
        d = self._t.request("POST", f"/sandboxes/{seg(self.id)}/access",
                            body={"destination": destination, "reason": reason}).json()
        return Approval._from(d)

    def expose(self, port: int, ttl: Optional[str] = None, to: Optional[List[str]] = None,
               name: Optional[str] = None) -> Dict[str, Any]:
        """Show the web app on ``port`` to reviewers through a preview
        (``airlock sandbox expose``): returns ``{id, url, expires, to,
        links}``, where ``links`` maps each principal to a one-time URL."""
        body: Dict[str, Any] = {"port": port}
        if ttl:
            body["ttl"] = ttl
        if to:
            body["to"] = list(to)
        if name:
            body["name"] = name
        return self._t.request("POST", f"/sandboxes/{seg(self.id)}/previews", body=body).json()

    def previews(self) -> List[Dict[str, Any]]:
        """The sandbox's live previews (without links)."""
        return self._t.request("GET", f"/sandboxes/{seg(self.id)}/previews").json() or []

    def unexpose(self, preview_id: str) -> None:
        """Revoke a preview; its open connections are closed."""
        self._t.request("DELETE", f"/sandboxes/{seg(self.id)}/previews/{seg(preview_id)}").read()

    def approval(self, approval_id: str) -> Approval:
        """The current state of an access request this sandbox filed."""
        for d in self._t.request("GET", "/approvals").json() or []:
            if d.get("id") == approval_id and d.get("sandbox") == self.id:
                return Approval._from(d)
        raise errors.NotFound(f"no approval {approval_id!r} of sandbox {self.id}", "not_found", 404)


def _lockfile(f: Union[str, "os.PathLike[str]", Tuple[str, str]]) -> Dict[str, str]:
    """A lockfile as the create request carries it: its name and content."""
    if isinstance(f, tuple):
        name, content = f
        return {"name": name, "content": content}
    with open(f, encoding="utf-8") as fh:
        return {"name": os.fspath(f), "content": fh.read()}
