"""The package's PEP 517 build backend, standard library only.

setuptools (65, as installed here) cannot build a wheel without the
``wheel`` package, which is not installed and cannot be fetched where PyPI
is out of reach; a pure-Python package needs no more than a zip with its
metadata, so ``pip install --no-build-isolation ./clients/python`` builds
it here. It reads the ``[project]`` table's plain ``key = "value"`` lines of
pyproject.toml and the version from idemgate/__init__.py (one source).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "idemgate"
TAG = "py3-none-any"
# Fixed times make the same sources build the same archive.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _project() -> Dict[str, str]:
    """The [project] table's string values, and the package's version."""
    table: Dict[str, str] = {}
    inside = False
    for line in _read("pyproject.toml").splitlines():
        if line.startswith("["):
            inside = line.strip() == "[project]"
            continue
        m = re.match(r'\s*([A-Za-z][\w-]*)\s*=\s*"([^"]*)"\s*$', line)
        if inside and m:
            table[m.group(1)] = m.group(2)
    v = re.search(r'^__version__ = "([^"]+)"', _read(PACKAGE + "/__init__.py"), re.M)
    if not v:
        raise RuntimeError("no __version__ in %s/__init__.py" % PACKAGE)
    table["version"] = v.group(1)
    return table


def _dist_info() -> str:
    p = _project()
    return "%s-%s.dist-info" % (p["name"].replace("-", "_"), p["version"])


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", ""), "Requires-Python: " + p.get("requires-python", ""),
             "License: Apache-2.0", "Description-Content-Type: text/markdown"]
    return "\n".join(lines) + "\n\n" + _read("README.md")


def _wheel_file() -> str:
    return "Wheel-Version: 1.0\nGenerator: idemgate _build/backend.py\nRoot-Is-Purelib: true\nTag: %s\n" % TAG


def _sources() -> List[str]:
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in sorted(files) if f.endswith(".py") or f == "py.typed"]
    return out


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    p = _project()
    name = "%s-%s-%s.whl" % (p["name"].replace("-", "_"), p["version"], TAG)
    info = _dist_info()
    files = files + [(info + "/METADATA", _metadata().encode()), (info + "/WHEEL", _wheel_file().encode())]
    record = io.StringIO()
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(zipfile.ZipInfo(arc, EPOCH), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.write("%s,sha256=%s,%d\n" % (arc, digest, len(data)))
        record.write(info + "/RECORD,,\n")
        z.writestr(zipfile.ZipInfo(info + "/RECORD", EPOCH), record.getvalue())
    return name


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [(rel.replace(os.sep, "/"), _read(rel).encode()) for rel in _sources()])


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel whose .pth puts this source directory on sys.path (PEP 660)."""
    return _write_wheel(wheel_directory, [(PACKAGE + ".pth", (ROOT + "\n").encode())])


def _prepare(metadata_directory: str) -> str:
    info = _dist_info()
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for fname, text in (("METADATA", _metadata()), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return info


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[dict] = None) -> str:
    return _prepare(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Optional[dict] = None) -> str:
    return _prepare(metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    p = _project()
    base = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        members = [("PKG-INFO", _metadata().encode())] + [
            (rel.replace(os.sep, "/"), _read(rel).encode())
            for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + _sources()]
        for arc, data in members:
            info = tarfile.TarInfo(base + "/" + arc)
            info.size, info.mtime, info.mode = len(data), time.mktime(EPOCH + (0, 0, -1)), 0o644
            t.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []
