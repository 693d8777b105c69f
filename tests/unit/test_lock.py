"""requirements.lock (what `make setup` installs, hashed) still satisfies pyproject.toml: a
dependency added or narrowed without `make lock` fails here, not on a clean clone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s\\;]+)", re.MULTILINE)


def pins() -> dict[str, str]:
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    return {canonicalize_name(name.split("[")[0]): version for name, version in PIN.findall(text)}


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in [*project["dependencies"], *extras["dev"], *extras["mcp"]]]


def from_this_repository() -> dict[str, str]:
    """Dependencies installed from folders of this checkout ([tool.uv.sources]): their versions."""
    sources = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["uv"]
    versions = {}
    for name, source in sources["sources"].items():
        folder = tomllib.loads((ROOT / source["path"] / "pyproject.toml").read_text("utf-8"))
        versions[canonicalize_name(name)] = folder["project"]["version"]
    return versions


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    local = from_this_repository()
    assert "tooljail-client" in local
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        if name in local:
            assert name not in pinned, f"{name} comes from this repository, not the lock"
            assert requirement.specifier.contains(local[name]), (name, local[name])
            continue
        assert name in pinned, f"{name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{name}=={pinned[name]} is outside {requirement.specifier}: run `make lock`"
        )


def test_every_pin_carries_a_hash() -> None:
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    blocks = re.split(r"\n(?=\S)", text.strip())
    pinned = [b for b in blocks if PIN.match(b)]
    assert len(pinned) == len(pins()) > 50
    assert all("--hash=sha256:" in block for block in pinned)
