"""PEP 517 build backend of the tidewire Python package: a platform wheel that carries
``libtidewire.so``.

``pip install ./python`` (or ``pip wheel ./python``, ``make wheel``) runs :func:`build_wheel`,
which builds the library from the source tree around ``python/`` with
``cargo build --release --lib`` (``$CARGO``, ``$CARGO_TARGET_DIR`` are honoured) and packs it
next to the Python modules, where ``tidewire._ffi`` looks after ``TIDEWIRE_LIB``. To package a
library built elsewhere instead (an sdist, a cross build), set ``TIDEWIRE_WHEEL_LIB`` to its
path. The backend needs nothing but the standard library, so builds work offline and in pip's
isolated build environments. Editable installs (``pip install -e``) point at ``python/`` and
use the library of ``target/release`` (or ``TIDEWIRE_LIB``).
"""

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)  # python/
ROOT = os.path.dirname(PYDIR)  # the source tree (Cargo.toml)
LIB_NAME = "libtidewire.so"
NAME = "tidewire"


def _project():
    """(version, description, requires-python) read from pyproject.toml (no TOML parser is
    needed for these three plain strings)."""
    with open(os.path.join(PYDIR, "pyproject.toml")) as f:
        text = f.read()

    def field(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % key, text, re.M)
        if not m:
            raise RuntimeError(f"pyproject.toml: no {key}")
        return m.group(1)

    return field("version"), field("description"), field("requires-python")


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def _metadata():
    version, description, requires_python = _project()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: {description}\n"
        f"Requires-Python: {requires_python}\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Provides-Extra: test\n"
        "Requires-Dist: pytest; extra == \"test\"\n"
    )


def _library():
    """Path of the shared library to pack: ``TIDEWIRE_WHEEL_LIB``, or a fresh cargo build."""
    given = os.environ.get("TIDEWIRE_WHEEL_LIB")
    if given:
        if not os.path.isfile(given):
            raise RuntimeError(f"TIDEWIRE_WHEEL_LIB={given}: no such file")
        return given
    if not os.path.isfile(os.path.join(ROOT, "Cargo.toml")):
        raise RuntimeError(
            "building the tidewire wheel needs the tidewire source tree (Cargo.toml above "
            "python/) or TIDEWIRE_WHEEL_LIB pointing at a built libtidewire.so")
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "--lib"]
    print("tidewire build: " + " ".join(cmd), file=sys.stderr)
    try:
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
    except FileNotFoundError:
        raise RuntimeError(f"{cargo!r} not found: install Rust (cargo) to build the wheel, or "
                           "set TIDEWIRE_WHEEL_LIB to a built libtidewire.so") from None
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    if not os.path.isabs(target):
        target = os.path.join(ROOT, target)
    lib = os.path.join(target, "release", LIB_NAME)
    if not os.path.isfile(lib):
        raise RuntimeError(f"cargo finished but {lib} is missing")
    return lib


def _package_files():
    """(archive name, path) of every module of the package and of its subpackages (``core``,
    ``mooncake_engine``, ``mooncake_store``), and its ``py.typed`` marker. The ``shim`` folder
    (a ``mooncake`` package for ``PYTHONPATH``) is not part of the installed package."""
    pkg = os.path.join(PYDIR, NAME)
    out = []
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d not in ("shim", "__pycache__"))
        rel = os.path.relpath(root, pkg).replace(os.sep, "/")
        prefix = NAME if rel == "." else f"{NAME}/{rel}"
        for name in sorted(files):
            # py.typed: the package is typed (PEP 561)
            if name.endswith(".py") or (name == "py.typed" and rel == "."):
                out.append((f"{prefix}/{name}", os.path.join(root, name)))
    return out


class _Wheel:
    """A wheel archive with its RECORD."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, record_name):
        self.records.append(f"{record_name},,")
        self.zip.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)),
                          "\n".join(self.records) + "\n")
        self.zip.close()


def _dist_info(version, tag, pure):
    return {
        "METADATA": _metadata(),
        "WHEEL": ("Wheel-Version: 1.0\nGenerator: tidewire_build\n"
                  f"Root-Is-Purelib: {'true' if pure else 'false'}\nTag: {tag}\n"),
        "top_level.txt": f"{NAME}\n",
    }


def _write_wheel(wheel_directory, tag, pure, members):
    version = _project()[0]
    filename = f"{NAME}-{version}-{tag}.whl"
    dist_info = f"{NAME}-{version}.dist-info"
    w = _Wheel(os.path.join(wheel_directory, filename))
    for arcname, data, mode in members:
        w.add(arcname, data, mode)
    for name, text in _dist_info(version, tag, pure).items():
        w.add(f"{dist_info}/{name}", text.encode())
    w.close(f"{dist_info}/RECORD")
    return filename


# --------------------------------------------------------------------------------------------
# PEP 517 / 660 hooks
# --------------------------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """A ``py3-none-<platform>`` wheel: the modules plus ``tidewire/libtidewire.so`` (the
    library does not depend on the Python version, only on the platform)."""
    lib = _library()
    members = []
    for arcname, path in _package_files():
        with open(path, "rb") as f:
            members.append((arcname, f.read(), 0o644))
    with open(lib, "rb") as f:
        members.append((f"{NAME}/{LIB_NAME}", f.read(), 0o755))
    return _write_wheel(wheel_directory, f"py3-none-{_platform_tag()}", False, members)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding only a ``.pth`` entry for ``python/``: the modules run from the source
    tree and find the library in ``target/release`` (or through ``TIDEWIRE_LIB``)."""
    members = [(f"__editable__.{NAME}.pth", (PYDIR + "\n").encode(), 0o644)]
    return _write_wheel(wheel_directory, "py3-none-any", True, members)


def build_sdist(sdist_directory, config_settings=None):
    """The Python sources only: building a wheel from it needs ``TIDEWIRE_WHEEL_LIB``."""
    version = _project()[0]
    base = f"{NAME}-{version}"
    path = os.path.join(sdist_directory, base + ".tar.gz")
    files = [("pyproject.toml", os.path.join(PYDIR, "pyproject.toml")),
             ("_build/tidewire_build.py", os.path.abspath(__file__))]
    files += _package_files()
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for arcname, src in files:
            tar.add(src, arcname=f"{base}/{arcname}")
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return os.path.basename(path)
