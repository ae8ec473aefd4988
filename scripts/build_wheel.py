#!/usr/bin/env python3
"""Packs the built Python package into a wheel: `make wheel`.

    build_wheel.py BUILD_DIR DIST_DIR

One wheel serves every CPython from 3.9 (tag py3-none-linux_x86_64): the
package loads libseedd_c with ctypes, so nothing in it depends on the
interpreter's ABI. libseedd_c goes in without its debug sections, and the
shared libraries it links that a minimal Debian 12 does not have (spdlog, fmt,
hiredis, xxhash, prometheus-cpp) go beside it, found through its RUNPATH
($ORIGIN); glibc, libstdc++ and OpenSSL 3 come from the system. libcurl, which
libseedd_c opens only when an S3 store or an http(s) origin needs it (dlopen,
searching the same RUNPATH), goes beside it too, with its libraries.

Written with the standard library only (a wheel is a zip with a RECORD).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

# The libraries every host of this kind has; the rest are bundled.
SYSTEM = re.compile(
    r"^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libssl|libcrypto)"
    r"\.so"
)
TAG = "py3-none-linux_x86_64"


def version_of(build: str) -> str:
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("CMAKE_PROJECT_VERSION:"):
                return line.split("=", 1)[1].strip()
    raise SystemExit(f"build_wheel: no project version in {build}/CMakeCache.txt")


def dependencies(library: str) -> list[str]:
    """The shared libraries `library` loads, as paths, the system's left out."""
    out = subprocess.run(["ldd", library], check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m is None:
            continue
        name, path = m.groups()
        if path == "not":
            raise SystemExit(f"build_wheel: {library} needs {name}, which is not installed")
        if not SYSTEM.match(name):
            found.append(path)
    return found


def system_library(soname: str) -> str:
    """The path of `soname` as the dynamic loader finds it (ldconfig's cache)."""
    out = subprocess.run(["ldconfig", "-p"], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m is not None and m.group(1) == soname and "x86-64" in m.group(2):
            return m.group(3)
    raise SystemExit(f"build_wheel: {soname} is not installed (Debian: libcurl4)")


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    build, dist = sys.argv[1], sys.argv[2]
    package = os.path.join(build, "python", "seedd")
    library = os.path.join(package, "libseedd_c.so")
    if not os.path.isfile(library):
        print(f"build_wheel: {library} is not built (make python)", file=sys.stderr)
        return 1
    version = version_of(build)
    info = f"seedd-{version}.dist-info"
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "seedd")
        os.makedirs(root)
        for name in sorted(os.listdir(package)):
            if name.endswith((".py", ".typed")):
                shutil.copy2(os.path.join(package, name), root)
        subprocess.run(
            ["objcopy", "--strip-debug", library, os.path.join(root, "libseedd_c.so")], check=True
        )
        curl = system_library("libcurl.so.4")
        bundled = dependencies(library) + [curl] + dependencies(curl)
        for dep in sorted(set(bundled)):
            target = os.path.join(root, os.path.basename(dep))
            subprocess.run(["objcopy", "--strip-debug", dep, target], check=True)
        os.makedirs(os.path.join(tmp, info))
        with open(os.path.join(tmp, info, "METADATA"), "w", encoding="utf-8") as f:
            f.write(
                "Metadata-Version: 2.1\n"
                "Name: seedd\n"
                f"Version: {version}\n"
                "Summary: Seed an inference engine's warm state (weights, autotune tables, "
                "compile caches) from peer daemons\n"
                "License: Apache-2.0\n"
                "Requires-Python: >=3.9\n"
                "Classifier: Programming Language :: Python :: 3\n"
                "Classifier: Operating System :: POSIX :: Linux\n"
            )
        with open(os.path.join(tmp, info, "WHEEL"), "w", encoding="utf-8") as f:
            f.write(
                "Wheel-Version: 1.0\n"
                "Generator: seedd build_wheel.py\n"
                "Root-Is-Purelib: false\n"
                f"Tag: {TAG}\n"
            )
        records = []
        for top in ("seedd", info):
            for name in sorted(os.listdir(os.path.join(tmp, top))):
                path = os.path.join(tmp, top, name)
                records.append((f"{top}/{name}", digest(path), os.path.getsize(path)))
        os.makedirs(dist, exist_ok=True)
        wheel = os.path.join(dist, f"seedd-{version}-{TAG}.whl")
        partial = wheel + ".partial"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            for name, _, _ in records:
                z.write(os.path.join(tmp, name), name)
            record = "".join(f"{n},{d},{s}\n" for n, d, s in records) + f"{info}/RECORD,,\n"
            z.writestr(f"{info}/RECORD", record)
        os.replace(partial, wheel)
    size = os.path.getsize(wheel)
    print(f"build_wheel: {wheel} ({size / 2**20:.1f} MiB, for CPython 3.9+ on Linux x86_64)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
