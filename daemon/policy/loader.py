"""Loading a policy folder (Rego modules and data.json) into an OPA server through its REST API."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opa_client import AsyncOpaClient
from opa_client.errors import RegoParseError

from daemon.errors import PolicyLoadError


@dataclass(frozen=True)
class PolicyFiles:
    """The modules and data of a policy folder."""

    modules: dict[str, str]
    """Module id (path relative to the folder) -> Rego source. Test files are left out."""
    data: dict[str, Any]
    """Contents of data.json at the folder's root (empty when absent)."""


def read_policy_folder(folder: Path) -> PolicyFiles:
    """Read every non-test .rego file and data.json below `folder`."""
    if not folder.is_dir():
        raise PolicyLoadError(f"policy folder {folder} does not exist")
    modules = {
        str(path.relative_to(folder)): path.read_text(encoding="utf-8")
        for path in sorted(folder.rglob("*.rego"))
        if not path.name.endswith("_test.rego")
    }
    if not modules:
        raise PolicyLoadError(f"policy folder {folder} has no .rego files")
    data_file = folder / "data.json"
    data: dict[str, Any] = {}
    if data_file.is_file():
        try:
            loaded = json.loads(data_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise PolicyLoadError(f"{data_file}:{exc.lineno}:{exc.colno}: {exc.msg}") from exc
        if not isinstance(loaded, dict):
            raise PolicyLoadError(f"{data_file}: the top level must be a JSON object")
        data = loaded
    return PolicyFiles(modules=modules, data=data)


def write_policy_snapshot(files: PolicyFiles, folder: Path) -> list[str]:
    """Write `files` into `folder` (a private directory, emptied first) the way `opa run` loads
    them at start, in one compile; returns the arguments for it, relative to `folder` so that
    OPA names the modules as the REST loader does (a later reload replaces them by id)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    root = folder.resolve()
    arguments: list[str] = []
    for module_id, source in files.modules.items():
        target = root / module_id
        if root not in target.resolve().parents:
            raise PolicyLoadError(f"module id {module_id!r} is not a path below the policy folder")
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
        arguments.append(module_id)
    if files.data:
        (folder / "data.json").write_text(
            json.dumps({key: _data_document(value) for key, value in files.data.items()}),
            encoding="utf-8",
        )
        arguments.append("data.json")
    return arguments


def _data_document(value: Any) -> dict[str, Any]:
    """What a data.json key is stored as: OPA's data API takes objects only."""
    return value if isinstance(value, dict) else {"value": value}


def describe_rego_error(exc: RegoParseError) -> str:
    """OPA's compile errors as `file:row:col: message` lines."""
    lines = []
    for error in exc.errors:
        if not isinstance(error, dict):
            continue
        location = error.get("location") or {}
        where = f"{location.get('file', '?')}:{location.get('row', '?')}:{location.get('col', '?')}"
        lines.append(f"{where}: {error.get('code', 'error')}: {error.get('message', '')}")
    return "\n".join(lines) or str(exc)


async def load_policy_files(
    client: AsyncOpaClient, files: PolicyFiles, previous: PolicyFiles | None = None
) -> None:
    """Upload data, then modules (modules that depend on others are retried until none progress),
    then delete the modules of `previous` that no longer exist."""
    for key, value in files.data.items():
        try:
            await client.update_or_create_data(_data_document(value), key)
        except RegoParseError as exc:
            raise PolicyLoadError(f"data.json key {key!r}: {describe_rego_error(exc)}") from exc
    pending = dict(files.modules)
    while pending:
        failures: dict[str, str] = {}
        for module_id, source in pending.items():
            try:
                await client.update_policy_from_string(source, module_id, rego_compat=False)
            except RegoParseError as exc:
                failures[module_id] = describe_rego_error(exc)
        if len(failures) == len(pending):
            raise PolicyLoadError("policy failed to compile:\n" + "\n".join(failures.values()))
        pending = {module_id: pending[module_id] for module_id in failures}
    for module_id in set(previous.modules if previous else ()) - set(files.modules):
        await client.delete_policy(module_id)
