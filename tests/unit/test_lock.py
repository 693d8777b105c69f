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


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
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
