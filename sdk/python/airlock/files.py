"""Single files in a sandbox, through its in-sandbox agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from . import errors
from ._http import seg

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass
class FileInfo:
    """A path in the sandbox."""

    name: str
    size: int
    mode: int
    type: str  # file | dir | symlink | other
    mod_time: str = ""
    uid: int = 0
    gid: int = 0
    symlink: str = ""

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(name=d.get("name", ""), size=d.get("size", 0), mode=d.get("mode", 0),
                   type=d.get("type", ""), mod_time=d.get("mod_time", ""), uid=d.get("uid", 0),
                   gid=d.get("gid", 0), symlink=d.get("symlink", ""))


class Files:
    """``sbx.files``: read, write, list and remove files in the sandbox.

    Paths are resolved inside the sandbox; one file is at most 256 MiB.
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox

    def _p(self, rest: str) -> str:
        return f"/sandboxes/{seg(self._sbx.id)}/fs/{rest}"

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The file's contents: text (UTF-8) or, with ``format="bytes"``, bytes."""
        if format not in ("text", "bytes"):
            raise errors.Invalid(f"format {format!r}: want 'text' or 'bytes'", "invalid")
        data = self._sbx._t.request("GET", self._p("file"), {"path": path}).read()
        return data if format == "bytes" else data.decode("utf-8", errors="replace")

    def write(self, path: str, data: Union[str, bytes], mode: Optional[int] = None) -> FileInfo:
        """Write the whole file atomically (permission bits ``mode``, default 0644)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        q = {"path": path, "mode": None if mode is None else format(mode, "04o")}
        return FileInfo._from(self._sbx._t.request("PUT", self._p("file"), q, data=raw).json())

    def list(self, path: str = "/workspace") -> List[FileInfo]:
        """The entries of a directory."""
        return [FileInfo._from(d) for d in self._sbx._t.request("GET", self._p("list"), {"path": path}).json() or []]

    def stat(self, path: str) -> FileInfo:
        """Describe one path (a symlink itself, not its target)."""
        return FileInfo._from(self._sbx._t.request("GET", self._p("stat"), {"path": path}).json())

    def exists(self, path: str) -> bool:
        """True when the path exists."""
        try:
            self.stat(path)
            return True
        except errors.NotFound:
            return False

    def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file or an empty directory (a tree with ``recursive``)."""
        self._sbx._t.request("DELETE", self._p("file"), {"path": path, "recursive": recursive}).read()

    def make_dir(self, path: str, parents: bool = True) -> None:
        """Make a directory (and its missing parents)."""
        self._sbx._t.request("POST", self._p("mkdir"), {"path": path, "parents": parents}).read()
