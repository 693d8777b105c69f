"""Every client carries the wire contract's version (proto/VERSION)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import tooljail

ROOT = Path(__file__).resolve().parents[2]


def test_every_client_carries_the_proto_version() -> None:
    version = (ROOT / "proto" / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    python = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())
    node = json.loads((ROOT / "clients/node/package.json").read_text())
    go = re.search(
        r'const ProtoVersion = "([^"]+)"', (ROOT / "clients/go/tooljailv1/version.go").read_text()
    )
    assert go, "clients/go/tooljailv1/version.go names no ProtoVersion"
    found = {
        "clients/python/pyproject.toml": python["project"]["version"],
        "tooljail.__version__": tooljail.__version__,
        "clients/node/package.json": node["version"],
        "clients/go ProtoVersion": go.group(1),
    }
    assert found == dict.fromkeys(found, version), f"proto/VERSION is {version}: {found}"


def test_the_daemon_requires_the_client_of_this_version() -> None:
    daemon = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version = (ROOT / "proto" / "VERSION").read_text().strip()
    assert f"tooljail-client=={version}" in daemon["project"]["dependencies"]
