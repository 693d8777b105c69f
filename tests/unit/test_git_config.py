"""Reading git configuration files: every sample is compared with what git itself lists for it,
and a file git refuses is refused here too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from daemon.host.git_config import UnreadableConfig, config_entries

SAMPLES = [
    "[core]\n\thooksPath = .githooks ; a comment\n\tbare = false\n",
    '[include]\n  path = "../.git config"\n[includeIf "gitdir:~/Work/"]\n\tpath = x\\\n  y\n',
    '[Alias]\n\tst = "!sh -c \\"tools/run x\\"" # c\n\tlg = log\\t--oneline\n',
    "[branch.Main]\n\tremote\n[core] fsmonitor = a b  \r\n# end\n",
    '[remote "Origin"]\n\turl = ../lib.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n',
    '[filter "lfs"]\n\tclean = "tools/lfs clean %f"\n\tsmudge = tools/lfs   smudge ;x\n',
    'k = before any section\n; only a comment\n\n[core]\n\teditor = "vim" -f\n',
    '[sub "a\\"b\\\\c"]\n\tk = v\n',
]

REFUSED = ["[core\n", "[core]\n\t1k = v\n", '[core]\n\tk = "open\n', "[core]\n\tk = \\q\n"]


def listed_by_git(path: Path) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["git", "config", "-f", str(path), "--list", "--null"],
        capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    entries = []
    for item in out.split("\0")[:-1]:
        key, _, value = item.partition("\n")
        entries.append((key, value if "\n" in item else "true"))
    return entries


@pytest.mark.parametrize("text", SAMPLES)
def test_entries_are_what_git_lists(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    assert config_entries(text) == listed_by_git(path)


@pytest.mark.parametrize("text", REFUSED)
def test_what_git_refuses_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    listed = subprocess.run(["git", "config", "-f", str(path), "--list"], capture_output=True)
    assert listed.returncode != 0
    with pytest.raises(UnreadableConfig, match="line"):
        config_entries(text)
