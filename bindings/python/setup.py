"""Builds the package's compiled part: `cargo build --release` of the repository this folder is in
(two levels up), and libbrevis.so copied into the package. The wheel is tagged for the platform
only (py3-none-<platform>): the library does not depend on the Python version.

Needs cargo on PATH. $CARGO_TARGET_DIR is honoured (default: the repository's target/).
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIBRARY = {"darwin": "libbrevis.dylib", "win32": "brevis.dll"}.get(sys.platform, "libbrevis.so")


def build_library():
    """Runs cargo and returns the path of the library it built."""
    if not os.path.isfile(os.path.join(REPO, "Cargo.toml")):
        sys.exit(f"brevis: {REPO} is not the Brevis repository (no Cargo.toml): build the package from "
                 "bindings/python inside a checkout")
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.isfile(cargo):
        sys.exit("brevis: cargo was not found (install Rust: https://rustup.rs); the package needs it to build "
                 "libbrevis")
    subprocess.run([cargo, "build", "--release", "--lib", "--locked"], cwd=REPO, check=True)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(target if os.path.isabs(target) else os.path.join(REPO, target), "release", LIBRARY)


class BuildWithLibrary(build_py):
    def run(self):
        # A build folder left by an earlier build may hold modules since removed: start clean.
        shutil.rmtree(os.path.join(self.build_lib, "brevis"), ignore_errors=True)
        super().run()
        library = build_library()
        package = os.path.join(self.build_lib, "brevis")
        os.makedirs(package, exist_ok=True)
        shutil.copy2(library, os.path.join(package, LIBRARY if sys.platform != "win32" else "brevis.dll"))


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
