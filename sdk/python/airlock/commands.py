"""Running commands in a sandbox: foreground with streaming, or background."""

from __future__ import annotations

import base64
import codecs
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import errors
from ._http import Response, seg

if TYPE_CHECKING:
    from .sandbox import Sandbox

OutputHandler = Callable[[str], None]
Command = Union[str, Sequence[str]]


@dataclass
class CommandResult:
    """How a command ended and what it printed."""

    exit_code: int
    stdout: str
    stderr: str
    exec_id: str
    duration_ms: int = 0
    timed_out: bool = False
    killed: bool = False
    signal: str = ""
    #: the limit that ended the command: "timeout", "fsize" (file size,
    #: SIGXFSZ) or "cpu" (CPU time, SIGXCPU); "" when none did
    limit: str = ""
    truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


@dataclass
class ProcessInfo:
    """A command the sandbox's agent knows (running, or just finished)."""

    exec_id: str
    pid: int
    argv: List[str]
    running: bool
    exit_code: Optional[int] = None
    cwd: str = ""
    user: str = ""
    started: str = ""


def _duration(seconds: Optional[float]) -> Optional[str]:
    if seconds is None:
        return None
    if seconds <= 0:
        raise errors.Invalid(f"timeout {seconds!r}: want a positive number of seconds", "invalid")
    return f"{seconds:.3f}s"


class _Stream:
    """Reads an exec NDJSON stream, decoding output as UTF-8 as it comes."""

    def __init__(self, on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler]) -> None:
        self.handlers = {"stdout": on_stdout, "stderr": on_stderr}
        self.dec = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in self.handlers}
        self.out: Dict[str, List[str]] = {"stdout": [], "stderr": []}

    def chunks(self, resp: Response) -> Iterator[Tuple[str, Any]]:
        """Yield ("stdout"|"stderr", text) and finally ("exit", dict)."""
        for line in resp.lines():
            f = json.loads(line)
            if f.get("exit") is not None:
                for k in self.dec:
                    tail = self.dec[k].decode(b"", final=True)
                    if tail:
                        yield k, tail
                yield "exit", f["exit"]
                return
            if f.get("error"):
                e = f["error"]
                raise errors.from_api(0, e.get("code", ""), e.get("message", "exec failed"), resp.request_id)
            name = f.get("stream")
            if name in self.dec:
                text = self.dec[name].decode(base64.b64decode(f.get("data") or ""))
                if text:
                    yield name, text
        raise errors.AirlockError("exec stream ended without an exit status", "internal", 0, resp.request_id)

    def run(self, resp: Response) -> Dict[str, Any]:
        for name, v in self.chunks(resp):
            if name == "exit":
                return v
            self.out[name].append(v)
            h = self.handlers[name]
            if h is not None:
                h(v)
        raise AssertionError("unreachable")

    def result(self, ex: Dict[str, Any]) -> CommandResult:
        return CommandResult(
            exit_code=ex.get("exit_code", -1), stdout="".join(self.out["stdout"]),
            stderr="".join(self.out["stderr"]), exec_id=ex.get("id", ""),
            duration_ms=ex.get("duration_ms", 0), timed_out=ex.get("timed_out", False),
            killed=ex.get("killed", False), signal=ex.get("signal", ""), limit=ex.get("limit", ""),
            truncated=ex.get("truncated", False), raw=ex)


def _finish(res: CommandResult, request_id: str, what: str) -> CommandResult:
    if res.timed_out:
        raise errors.Timeout(f"{what} ran past its timeout and was stopped (exec {res.exec_id})",
                             "timeout", 0, request_id, result=res)
    return res


def _from_record(ex: Dict[str, Any], on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler],
                 exec_id: str) -> CommandResult:
    out: Dict[str, str] = {}
    cut = False
    for name, h in (("stdout", on_stdout), ("stderr", on_stderr)):
        head, tail = ex.get(name + "_head", "").encode(), ex.get(name + "_tail", "").encode()
        total = ex.get(name + "_bytes", 0)
        if len(head) >= total or not tail:
            raw = head
        elif len(head) + len(tail) >= total:  # they overlap: the whole output
            raw = head + tail[len(head) + len(tail) - total:]
        else:
            raw, cut = head + tail, True
        cut = cut or len(raw) < total
        text = out[name] = raw.decode("utf-8", "replace")
        if h is not None and text:
            h(text)
    code = ex.get("exit_code")
    return CommandResult(exit_code=-1 if code is None else code, stdout=out["stdout"], stderr=out["stderr"],
                         exec_id=exec_id, duration_ms=ex.get("duration_ms", 0), timed_out=ex.get("timed_out", False),
                         killed=ex.get("killed", False), signal=ex.get("signal", ""), limit=ex.get("limit", ""),
                         truncated=cut,
                         raw=dict(ex, recorded=True))


class CommandHandle:
    """A background command: wait for it, stream its output, signal or kill it."""

    def __init__(self, sandbox: "Sandbox", exec_id: str, pid: int = 0) -> None:
        self.sandbox = sandbox
        self.exec_id = exec_id
        self.pid = pid
        self._thread: Optional[threading.Thread] = None
        self._result: Optional[CommandResult] = None
        self._error: Optional[BaseException] = None

    def _path(self, rest: str) -> str:
        return f"/sandboxes/{seg(self.sandbox.id)}/processes/{seg(self.exec_id)}{rest}"

    def _attach(self, timeout: Optional[float]) -> Response:
        return self.sandbox._t.request("GET", self._path("/attach"), timeout=timeout)

    def stream(self, timeout: Optional[float] = None) -> Iterator[Tuple[str, str]]:
        """Yield ("stdout"|"stderr", text) as the command prints, from the
        last 512 KiB it kept, until it ends (nothing if it has ended and
        been recorded: use ``wait()``)."""
        try:
            resp = self._attach(timeout)
        except errors.NotFound:
            return
        for name, v in _Stream(None, None).chunks(resp):
            if name == "exit":
                return
            yield name, v

    def wait(self, on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None,
             timeout: Optional[float] = None) -> CommandResult:
        """Wait until the command ends and return its result. ``timeout``
        bounds the wait only: the command goes on. Raises ``Timeout`` if
        the command's own timeout stopped it.

        A handle from ``run(background=True)`` has followed the command's
        output from its start; a handle from ``connect()`` gets the last
        512 KiB the agent kept. A command that had already ended and been
        recorded is read from its audit record (``result.raw["recorded"]``;
        its output is the record's head and tail when it was long)."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise errors.Timeout(f"exec {self.exec_id} still running after {timeout}s", "timeout")
            if self._error is not None:
                raise self._error
            assert self._result is not None
            return _finish(self._result, "", f"exec {self.exec_id}")
        res = self._attach_result(on_stdout, on_stderr, timeout)
        return _finish(res, "", f"exec {self.exec_id}")

    def _attach_result(self, on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler],
                       timeout: Optional[float]) -> CommandResult:
        st = _Stream(on_stdout, on_stderr)
        try:
            resp = self._attach(timeout)
        except errors.NotFound:
            return self._recorded(on_stdout, on_stderr)
        return st.result(st.run(resp))

    def _recorded(self, on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler]) -> CommandResult:
        """The result of an ended command from its finished exec record."""
        deadline = time.monotonic() + 10
        while True:
            for e in self.sandbox.egress.events(kind="exec"):
                ex = e.raw.get("exec") or {}
                if e.raw.get("id") == self.exec_id and ex.get("stage") == "finished":
                    return _from_record(ex, on_stdout, on_stderr, self.exec_id)
            if time.monotonic() > deadline:
                raise errors.NotFound(f"exec {self.exec_id}: the agent does not know it and it has no finished record",
                                      "not_found", 404)
            time.sleep(0.1)

    def _follow(self, on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler]) -> None:
        def run() -> None:
            try:
                self._result = self._attach_result(on_stdout, on_stderr, None)
            except BaseException as e:  # handed to wait()
                self._error = e
        self._thread = threading.Thread(target=run, name=f"airlock-{self.exec_id}", daemon=True)
        self._thread.start()

    def kill(self) -> None:
        """End the command and everything it spawned (TERM, grace, KILL)."""
        self.sandbox._t.request("POST", self._path("/kill")).read()

    def signal(self, sig: str) -> None:
        """Send a signal (``"TERM"``, ``"HUP"``, ``"9"``) to the command's main process."""
        self.sandbox._t.request("POST", self._path("/signal"), body={"signal": sig}).read()

    def is_running(self) -> bool:
        """True while the sandbox's agent reports the command running."""
        for p in self.sandbox.commands.list():
            if p.exec_id == self.exec_id:
                return p.running
        return False


class Commands:
    """``sbx.commands``: run commands in the sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox

    def run(self, cmd: Command, timeout: Optional[float] = None, cwd: Optional[str] = None,
            env: Optional[Dict[str, str]] = None, on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, background: bool = False,
            user: Optional[str] = None, stdin: Optional[Union[str, bytes]] = None,
            ) -> Any:
        """Run ``cmd`` (a shell line, or an argv list) and return its result.

        ``timeout`` (seconds) stops the command when it runs longer; then
        ``Timeout`` is raised with the partial result in ``.result``.
        ``on_stdout``/``on_stderr`` get output text as it arrives. A
        non-zero exit is not an error: check ``result.exit_code``. With
        ``background=True`` it returns a ``CommandHandle`` at once; a thread
        follows the command's output (feeding the handlers, if given) until
        ``handle.wait()`` returns it.
        """
        req: Dict[str, Any] = {"cwd": cwd, "env": env, "user": user, "timeout": _duration(timeout)}
        if isinstance(cmd, str):
            req["shell"] = cmd
        else:
            req["argv"] = list(cmd)
        if stdin is not None:
            raw = stdin.encode() if isinstance(stdin, str) else stdin
            req["stdin"] = base64.b64encode(raw).decode()
        if background:
            req["background"] = True
        body = {k: v for k, v in req.items() if v is not None}
        # The socket waits as long as the command may run, and a little more.
        sock_to = None if timeout is None else timeout + 30.0
        resp = self._sbx._t.request("POST", f"/sandboxes/{seg(self._sbx.id)}/exec", body=body, timeout=sock_to)
        st = _Stream(None if background else on_stdout, None if background else on_stderr)
        ex = st.run(resp)
        if background:
            h = CommandHandle(self._sbx, ex.get("id", ""), ex.get("pid", 0))
            h._follow(on_stdout, on_stderr)  # keep its output from the start
            return h
        return _finish(st.result(ex), resp.request_id, f"command {cmd!r}")

    def connect(self, exec_id: str) -> CommandHandle:
        """A handle of a command started earlier (e.g. by another process)."""
        return CommandHandle(self._sbx, exec_id)

    def list(self) -> List[ProcessInfo]:
        """The sandbox's commands: running ones, and finished ones not yet recorded."""
        out = []
        for p in self._sbx._t.request("GET", f"/sandboxes/{seg(self._sbx.id)}/processes").json() or []:
            out.append(ProcessInfo(exec_id=p["id"], pid=p.get("pid", 0), argv=p.get("argv") or [],
                                   running=p.get("running", False), exit_code=p.get("exit_code"),
                                   cwd=p.get("cwd", ""), user=p.get("user", ""), started=p.get("started", "")))
        return out

    def kill(self, exec_id: str) -> None:
        """Kill a command by its exec id."""
        self.connect(exec_id).kill()
