# SPDX-License-Identifier: Apache-2.0
"""One version for Python, Rust and C, from the workspace's Cargo.toml, above the last
release published on PyPI (ucall 0.5.4) so that pip treats this package as an upgrade."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import ucall
from conftest import REPO_ROOT

PUBLISHED = (0, 5, 4)  # the newest ucall on PyPI before this code base


def workspace_version() -> str:
    with open(REPO_ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups())


def test_python_carries_the_workspace_version() -> None:
    version = workspace_version()
    assert ucall.__version__ == version
    assert importlib.metadata.version("ucall") == version  # what pip sees (maturin's dynamic version)


def test_every_crate_takes_the_workspace_version() -> None:
    for manifest in sorted((REPO_ROOT / "crates").glob("*/Cargo.toml")):
        with open(manifest, "rb") as f:
            package = tomllib.load(f)["package"]
        assert package["version"] == {"workspace": True}, manifest


def test_the_c_header_carries_the_workspace_version() -> None:
    # The defines are generated from crates/ucall-capi (make header); a Rust test checks
    # those constants against the crate version and the C test ucall_version() against them.
    header = (REPO_ROOT / "include" / "ucall" / "ucall.h").read_text()
    found = tuple(
        int(re.search(rf"#define UCALL_VERSION_{p} (\d+)", header).group(1)) for p in ("MAJOR", "MINOR", "PATCH")
    )
    assert found == parts(workspace_version())


def test_the_version_supersedes_the_published_one() -> None:
    assert parts(workspace_version()) > PUBLISHED


def test_every_package_states_the_workspace_version() -> None:
    # The crates' versioned dependencies on each other, @ucall/client (package.json and its
    # lock), ucall.h's macros, and the find_package() lines the docs show.
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_versions", REPO_ROOT / "packaging" / "check_versions.py")
    assert spec is not None and spec.loader is not None
    check_versions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_versions)
    assert check_versions.problems() == []
    assert set(check_versions.stated_versions()) >= {"js/package.json", "include/ucall/ucall.h"}
