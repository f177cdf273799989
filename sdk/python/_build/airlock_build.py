"""A PEP 517 build backend in the standard library only.

It lets ``pip install ./sdk/python`` work on a machine with no network and
no setuptools or wheel (Debian's python3 -m venv has setuptools but not
wheel). It builds a pure-Python wheel of the ``airlock`` package.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tarfile
import zipfile
from typing import Any, Dict, List, Optional

NAME, VERSION = "airlock", "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = f"{NAME}-{VERSION}"
TAG = "py3-none-any"


def _metadata() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: Python SDK of the Airlock egress-control appliance\n"
            "Requires-Python: >=3.9\nLicense: Apache-2.0\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _files() -> List[str]:
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, NAME)):
        for n in sorted(names):
            if n.endswith(".py") or n == "py.typed":
                out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    info = os.path.join(metadata_directory, f"{DIST}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return f"{DIST}.dist-info"


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    name = f"{DIST}-{TAG}.whl"
    info = f"{DIST}.dist-info"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            record.append(_record_line(arc, data))
        for rel in _files():
            with open(os.path.join(ROOT, rel), "rb") as f:
                add(rel.replace(os.sep, "/"), f.read())
        add(f"{info}/METADATA", _metadata().encode())
        add(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: airlock_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode())
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name = f"{DIST}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in _files() + ["pyproject.toml", "README.md", "_build/airlock_build.py"]:
            t.add(os.path.join(ROOT, rel), arcname=f"{DIST}/{rel}")
    return name
