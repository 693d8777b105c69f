"""The facts the policy decides on (daemon.shell.facts, daemon.shell.git): which words are only
known at run time, which paths static ones name, where each command runs after `cd`s, and how
git reads its command line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from daemon.shell import facts as facts_module
from daemon.shell.facts import command_facts, written_files
from daemon.shell.git import parse_git
from daemon.shell.hidden import hidden_code
from daemon.shell.parse import parse_command
from daemon.shell.readonly import is_read_only
from tests.unit.conftest import links_unreadable_below

WORKSPACE = "/srv/ws"
CWD = "/srv/ws/app"


def facts(line: str) -> list[dict[str, Any]]:
    return command_facts(parse_command(line), CWD, WORKSPACE)


def words(line: str, index: int = 0) -> list[tuple[str, bool, str]]:
    return [(w["text"], w["dynamic"], w["path"]) for w in facts(line)[index]["words"]]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("rm -rf .", [("-rf", False, ""), (".", False, "/srv/ws/app")]),
        ("rm -rf ./", [("-rf", False, ""), ("./", False, "/srv/ws/app")]),
        ("rm -rf /srv/ws/.", [("-rf", False, ""), ("/srv/ws/.", False, "/srv/ws")]),
        ("rm -rf /srv//ws///", [("-rf", False, ""), ("/srv//ws///", False, "/srv/ws")]),
        ("rm -rf ../app/..", [("-rf", False, ""), ("../app/..", False, "/srv/ws")]),
        ("rm -rf x{1..3}", [("-rf", False, ""), ("x{1..3}", True, "")]),
        ('rm -rf "$D"', [("-rf", False, ""), ("$D", True, "")]),
        ("rm -rf '$D'", [("-rf", False, ""), ("$D", False, "/srv/ws/app/$D")]),
        ("rm -rf *.o", [("-rf", False, ""), ("*.o", True, "")]),
        ("rm -rf {a,b}", [("-rf", False, ""), ("{a,b}", True, "")]),
        ("rm -rf ~/x", [("-rf", False, ""), ("~/x", True, "")]),
        ("rm -rf $(pwd)", [("-rf", False, ""), ("$(pwd)", True, "")]),
        ("rm -- -rf", [("--", False, ""), ("-rf", False, "/srv/ws/app/-rf")]),
    ],
)
def test_each_word_is_static_or_dynamic_and_static_ones_name_a_path(
    line: str, expected: list[tuple[str, bool, str]]
) -> None:
    assert words(line) == expected


@pytest.mark.parametrize(
    ("line", "cwds"),
    [
        ("cd /srv/ws && rm -rf .", ["/srv/ws/app", "/srv/ws"]),
        ("cd .. && cd app/sub && ls", ["/srv/ws/app", "/srv/ws", "/srv/ws/app/sub"]),
        ("cd a && ls && rm -rf .", ["/srv/ws/app", "/srv/ws/app/a", "/srv/ws/app/a"]),
        # The next command may run although the cd failed: not certain.
        ("cd a; rm -rf .", ["/srv/ws/app", ""]),
        ("cd a || rm -rf .", ["/srv/ws/app", ""]),
        ("cd a && ls; rm -rf .", ["/srv/ws/app", "/srv/ws/app/a", ""]),
        ("cd a && rm x || echo", ["/srv/ws/app", "/srv/ws/app/a", ""]),
        # A cd that stays in a subshell, a pipeline stage or a loop.
        ("(cd a && rm -rf ..)", ["/srv/ws/app", ""]),
        ("cd a | rm -rf .", ["/srv/ws/app", ""]),
        ("for x in 1; do cd /; done; rm -rf y", ["/srv/ws/app", ""]),
        # Where it goes is not known.
        ('cd "$X" && rm -rf y', ["/srv/ws/app", ""]),
        ("cd && rm -rf y", ["/srv/ws/app", ""]),
        ("cd - && rm -rf y", ["/srv/ws/app", ""]),
    ],
)
def test_a_cd_is_followed_only_while_it_is_certain(line: str, cwds: list[str]) -> None:
    assert [f["cwd"] for f in facts(line)] == cwds


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["git", "push", "--forc", "o", "m"],
         {"subcommand": "push", "options": ["--forc"], "operands": ["o", "m"]}),
        (["git", "push", "--del", "o", "x"],
         {"subcommand": "push", "options": ["--delete"], "operands": ["o", "x"]}),
        (["git", "push", "--force-with-l"], {"options": ["--force-with-lease"]}),
        (["git", "push", "-fu", "o"], {"options": ["-f", "-u"], "operands": ["o"]}),
        (["git", "push", "-oci.skip", "o"], {"options": ["-o=ci.skip"], "operands": ["o"]}),
        (["git", "clean", "-fdx"], {"options": ["-f", "-d", "-x"]}),
        (["git", "reset", "--ha"], {"options": ["--hard"]}),
        # git's chdir goes through links: above a link's target is not known lexically.
        (["git", "-C", "..", "status"], {"directory": "", "subcommand": "status"}),
        (["git", "-C/tmp", "status"], {"directory": "/tmp"}),
        (["git", "-c", "alias.p=push -f", "p"],
         {"config": ["alias.p=push -f"], "subcommand": "p", "known": False}),
        (["git", "--git-dir=/x", "log"], {"redirected": True, "subcommand": "log"}),
        (["git", "--no-pager", "log"], {"subcommand": "log", "known": True, "dynamic": False}),
        (["git", "--version"], {"subcommand": "", "known": False}),
        (["git", "--frobnicate", "log"], {"dynamic": True}),
    ],
)  # fmt: skip
def test_git_is_read_the_way_git_reads_it(argv: list[str], expected: dict[str, Any]) -> None:
    git = parse_git(argv, [False] * len(argv), CWD).to_policy()
    assert {key: git[key] for key in expected} == expected


def test_a_dynamic_git_subcommand_is_said_to_be_unknown() -> None:
    [fact] = facts("git $CMD --force")
    assert fact["git"]["subcommand"] == "" and fact["git"]["dynamic"] is True


def test_cdpath_or_an_assignment_makes_a_cd_uncertain() -> None:
    """Attack: `CDPATH=/tmp cd x && rm -rf ws/` went to /tmp/x while the facts said <cwd>/x."""
    assert [f["cwd"] for f in facts("CDPATH=/tmp cd x && rm -rf ws/")] == [CWD, ""]
    assert [f["cwd"] for f in facts("export CDPATH=/; cd srv && rm -rf ws")] == [CWD, CWD, ""]


@pytest.mark.parametrize(
    "line",
    ["env -C .. chmod 777 app", "env --chdir=.. chmod 777 app", "env -iC.. chmod 777 app",
     "env --ch .. chmod 777 app", "find . -execdir chmod 777 app ;"],
)  # fmt: skip
def test_a_command_a_wrapper_runs_elsewhere_has_no_known_place(line: str) -> None:
    """Attack (round 186): `env -C .. chmod 777 app` opened the directory the line runs in,
    which the facts placed below it."""
    chmod = next(f for f in facts(line) if f["name"] == "chmod")
    assert chmod["cwd"] == ""
    assert [w["path"] for w in chmod["words"]] == ["", ""]


def test_paths_after_a_link_is_made_are_unknown() -> None:
    """Attack: `ln -s . L && rm -rf L/` deleted the workspace through a link the line made."""
    assert words("ln -s . L && rm -rf L/", 1) == [("-rf", False, ""), ("L/", False, "")]


def test_links_already_on_the_disk_are_followed(tmp_path: Path) -> None:
    (tmp_path / "L").symlink_to(".")
    [fact] = command_facts(parse_command("find L/ -delete"), str(tmp_path), str(tmp_path))
    assert fact["words"][0]["path"] == str(tmp_path)
    # rm's own operands are resolved before it removes anything.
    [rm] = command_facts(parse_command("rm -rf L/"), str(tmp_path), str(tmp_path))
    assert rm["words"][1]["path"] == str(tmp_path)
    # Another command that removes or makes names: a path through a link is unknown (below).
    _, rm = command_facts(parse_command("mkdir -p x && rm -rf L/"), str(tmp_path), str(tmp_path))
    assert rm["words"][1]["path"] == ""


@pytest.mark.parametrize(
    "line",
    [
        "printf -v 'a[$(rm -rf x)]' y",
        "x='a[$(rm -rf src)]'; echo $((x))",
        "[[ -v 'a[$(rm -rf src)]' ]]",
        "declare 'a[`id`]=1'",
        # Attacker round 150: a name built at run time, its subscript evaluated by `${!x}`.
        "x=$(printf 'a\\x5b\\x24\\x28rm -rf w\\x29]'); echo ${!x}",
        "echo ${!x}",
        # Attacker round 193: the subscript spelt with $'...' escapes, in an assignment alone.
        "x=$'a\\x5b\\x24(id; rm -rf src)\\x5d'; echo $((x))",
        "x=$'a\\x5b\\x60id\\x60\\x5d'; test -v \"$x\"",
    ],
)
def test_code_hidden_in_a_subscript_is_found(line: str) -> None:
    assert hidden_code(parse_command(line))


@pytest.mark.parametrize(
    "line", ['[ -n "$(ls)" ]', "echo $((1 + 2))", "arr[$i]=1", "ls", "echo $'a\\x5b1\\x5d'"]
)
def test_ordinary_lines_hide_no_code(line: str) -> None:
    assert not hidden_code(parse_command(line))


def _written(line: str, cwd: str) -> list[dict[str, Any]]:
    parsed = parse_command(line)
    directories = [cwd, *(c["cwd"] for c in command_facts(parsed, cwd, cwd))]
    return written_files(parsed, directories, cwd)


def test_a_redirect_is_resolved_from_every_directory_the_line_writes_from(tmp_path: Path) -> None:
    ws = str(tmp_path)
    [hook] = _written(f"cd {ws}/.git && printf x > hooks/pre-commit", ws)
    assert hook == {
        "target": "hooks/pre-commit",
        "normal": "hooks/pre-commit",
        "paths": [f"{ws}/hooks/pre-commit", f"{ws}/.git/hooks/pre-commit"],
        "known": True,
        "basename": "pre-commit",
        "basename_whole": True,
    }
    [absolute] = _written("echo x > /srv/ws/.git/config", ws)
    assert absolute["paths"] == ["/srv/ws/.git/config"] and absolute["known"]


def test_a_link_on_disk_is_followed(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "h").symlink_to(tmp_path / ".git" / "hooks")
    [through] = _written("echo x > h/pre-commit", str(tmp_path))
    assert through["paths"] == [f"{tmp_path}/.git/hooks/pre-commit"]


@pytest.mark.parametrize(
    "line",
    ['cd "$D" && echo x > config', "cd x; echo x > config", "echo x > $HOME/config"],
    ids=["cd to an expansion", "cd that may fail", "expansion in the target"],
)
def test_a_place_that_cannot_be_told_is_not_known(tmp_path: Path, line: str) -> None:
    [written] = _written(line, str(tmp_path))
    assert not written["known"]


def test_a_link_made_by_the_line_or_a_physical_cd_leaves_the_place_unknown(tmp_path: Path) -> None:
    [linked] = _written("ln -s repo/.git G && echo x >> G/config", str(tmp_path))
    assert not linked["known"]
    [physical] = _written("cd -P H/.. && echo x > objects/../hooks/post-merge", str(tmp_path))
    assert not physical["known"] and physical["normal"] == "hooks/post-merge"


def test_a_link_that_cannot_be_read_is_unknown_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name in the workspace whose link the daemon may not read (a folder its owner closed,
    with a non-root daemon): realpath raised once, and the Bash call failed with an internal
    error instead of being judged. Where it leads is unknown, not the name as written."""
    (tmp_path / "locked").mkdir()
    links_unreadable_below(monkeypatch, tmp_path / "locked")
    [written] = _written("echo x > locked/L/hooks/pre-commit", str(tmp_path))
    assert not written["known"] and written["paths"] == []
    [rm] = command_facts(parse_command("rm locked/L"), str(tmp_path), str(tmp_path))
    assert rm["words"][0]["path"] == ""
    assert rm["words"][0]["basename"] == "L"


def test_links_are_not_followed_once_the_path_left_the_workspace(tmp_path: Path) -> None:
    """Attack (round 77's, for Bash): the daemon resolved a command's paths as root on the
    host, so `cat /proc/self/fd/N` told the policy, and a deny reason the caller, which file the
    daemon holds open (another tenant's workspace), and a link in a folder the caller may not
    read where it leads. The command runs in a container: beyond the workspace, the host's
    links are not its files. A path is resolved while it stays in the workspace only."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hop").symlink_to("/etc")
    (workspace / "out").symlink_to(outside / "hop")
    (workspace / "in").symlink_to("sub")
    held = os.open(workspace, os.O_RDONLY)
    try:
        line = f"cat /proc/self/fd/{held}/x out/passwd in/f {outside}/hop/passwd"
        [cat] = command_facts(parse_command(line), str(workspace), str(workspace))
    finally:
        os.close(held)
    assert [word["path"] for word in cat["words"]] == [
        f"/proc/self/fd/{held}/x",  # not the workspace the daemon holds open
        f"{outside}/hop/passwd",  # the link in the workspace followed; the one outside it not
        f"{workspace}/sub/f",
        f"{outside}/hop/passwd",
    ]
    [written] = _written("echo x > out/passwd", str(workspace))
    assert written["paths"] == [f"{outside}/hop/passwd"] and written["known"]


@pytest.mark.parametrize(
    ("text", "end", "whole"),
    [
        (".gi${Z}t/hook${Z}s/pre-commit", "pre-commit", True),
        (".git/conf?g", "g", False),
        ("$HOOK", "", False),
        ("out_$i.txt", ".txt", False),
        ("${a:-${b}}config", "config", False),
        ("$(pwd)/config", "config", True),
        ("conf[ab]g", "g", False),
        ("G/pre-push", "pre-push", True),
    ],
)
def test_the_end_of_a_name_is_known_as_far_as_it_is_written(
    text: str, end: str, whole: bool
) -> None:
    assert facts_module.name_end(text) == {"basename": end, "basename_whole": whole}


@pytest.mark.parametrize(
    "line",
    [
        "mv d e && mv lnk d && echo x > d/notes.txt",
        'python3 -c \'import os; os.symlink("a", "d")\' && echo x > d/notes.txt',
        "$TOOL x && echo x > d/notes.txt",
    ],
)
def test_after_a_program_that_may_make_links_no_place_is_known(tmp_path: Path, line: str) -> None:
    """Attacker round 57: `mv lnk d` made d a link; only ln, link, cp and symlink counted."""
    [written] = _written(line, str(tmp_path))
    assert not written["known"]
    command = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
    # Where it is cannot be told, but its name can (attacker round 60).
    assert command["words"] == [
        {"text": "x", "dynamic": False, "path": "", "basename": "x", "basename_whole": True}
    ]


@pytest.mark.parametrize(
    "line", ["cd .git/hooks; cp ../../h pre-commit", "(cd .git/hooks && cp ../../h pre-commit)"]
)
def test_a_word_where_the_directory_is_not_certain_keeps_its_name(line: str) -> None:
    """Attacker round 60: after a `cd` that may fail, or in a subshell, the words had no path
    and no name, so the policy saw nothing of `pre-commit`."""
    copy = command_facts(parse_command(line), "/srv/ws", "/srv/ws")[-1]
    assert copy["cwd"] == ""
    assert [(w["path"], w["basename"], w["basename_whole"]) for w in copy["words"]] == [
        ("", "h", True),
        ("", "pre-commit", True),
    ]


def test_a_line_of_readers_and_plain_writers_keeps_its_places(tmp_path: Path) -> None:
    [written] = _written("mkdir -p d && grep -n x a.txt && echo x > d/notes.txt", str(tmp_path))
    assert written["known"] and written["paths"] == [f"{tmp_path}/d/notes.txt"]


@pytest.mark.parametrize(
    "line", ["find x/L/.. -delete", "cd x/L && find .. -delete", "echo y > x/L/../.git/config"]
)
def test_dot_dot_after_a_link_goes_where_the_kernel_goes(tmp_path: Path, line: str) -> None:
    """Attacker round 57: with x/L a link to ../a, `x/L/..` is the workspace, not x; the paths
    were collapsed lexically before the link was followed, and the workspace was emptied."""
    (tmp_path / "x").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "x" / "L").symlink_to("../a")
    last = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
    paths = [w["path"] for w in last["words"]]
    written = _written(line, str(tmp_path))
    if written:
        assert written[0]["paths"] == [f"{tmp_path}/.git/config"]
    else:
        assert paths[0] == str(tmp_path), paths


def test_words_past_the_resolving_budget_have_no_known_place(tmp_path: Path) -> None:
    (tmp_path / "L").symlink_to(".")
    line = "touch " + " ".join(f"f{i}" for i in range(250)) + " && rm -rf L/"
    last = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
    assert [w["path"] for w in last["words"]] == ["", ""]


def test_a_path_that_goes_back_up_after_leaving_the_workspace_is_unknown(tmp_path: Path) -> None:
    """Attacker round 78: past a link out of the workspace the rest was taken as written and
    its `..` taken away with the names before them, so `l/../../../<ws>/S/` (l a link to
    /proc/self/cwd, which in the container is the command's directory) read as `<ws>/S`, a
    subfolder, while `rm -rf` of it emptied the workspace through a link planted at
    <ws>/<ws>/S. Beyond the workspace, a `..` makes the path unknown."""
    workspace = tmp_path / "ws"
    (workspace / "a" / "b" / "c").mkdir(parents=True)
    (workspace / "l").symlink_to("/proc/self/cwd")
    relative = str(workspace).lstrip("/")
    line = f"cd a/b/c && rm -rf ../../../l/../../../{relative}/S/"
    rm = command_facts(parse_command(line), str(workspace), str(workspace))[-1]
    assert rm["cwd"] == f"{workspace}/a/b/c"
    assert [word["path"] for word in rm["words"]] == ["", ""]
    [written] = _written(f"echo x > l/../{relative}/.git/config", str(workspace))
    assert not written["known"] and written["paths"] == []
    # Past the link without going back up: as written, as before.
    [cat] = command_facts(parse_command("cat l/x"), str(workspace), str(workspace))
    assert cat["words"][0]["path"] == "/proc/self/cwd/x"


def test_a_cd_through_a_link_and_back_up_is_known_only_where_bash_lands_for_sure(
    tmp_path: Path,
) -> None:
    """Attacker round 80: bash's `cd` takes `..` lexically, but where that names no directory
    it goes to the path as written, through links: `cd <ws>/sub/L/../deep` (L -> ../a/x) was
    judged to land in <ws>/sub/deep (missing) while bash went to <ws>/a/deep, where `S` linked
    to the workspace: `rm -rf S/` emptied it unasked. git -C goes through links always."""
    ws = tmp_path
    for folder in ("sub", "a/x", "a/deep", "b/deep"):
        (ws / folder).mkdir(parents=True)
    (ws / "sub" / "L").symlink_to("../a/x")
    (ws / "a" / "deep" / "S").symlink_to(ws)
    line = f"cd {ws}/sub/L/../deep && rm -rf S/"
    _, rm = command_facts(parse_command(line), str(ws), str(ws))
    assert rm["cwd"] == "" and rm["words"][1]["path"] == ""
    # Where the lexical and the physical folder are one, the cd is followed as before.
    (ws / "b" / "L").symlink_to("x")
    (ws / "b" / "x").mkdir()
    _, ls = command_facts(parse_command("cd b/L/../deep && ls"), str(ws), str(ws))
    assert ls["cwd"] == f"{ws}/b/deep"
    _, up = command_facts(parse_command("cd sub/../a && ls"), str(ws), str(ws))
    assert up["cwd"] == f"{ws}/a"
    assert parse_git(["git", "-C", "sub/L/..", "status"], [], str(ws)).directory == ""
    assert parse_git(["git", "-C", "sub", "status"], [], str(ws)).directory == f"{ws}/sub"


def test_a_cd_after_an_or_is_not_certain(tmp_path: Path) -> None:
    """Attacker round 81: in `true || cd a/b && find L/.. -delete` the cd never runs, but it
    was followed (the right side of `||` took the `&&` after it as its own)."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    for line in ("true || cd a/b && find .. -delete", "false && cd a/b || true && ls .."):
        last = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
        assert last["cwd"] == "", line
    last = command_facts(parse_command("true && cd a/b && ls"), str(tmp_path), str(tmp_path))[-1]
    assert last["cwd"] == f"{tmp_path}/a/b"


@pytest.mark.parametrize(
    "before",
    [
        "printf -v CD''PATH /x",
        "read -r CD''PATH <<< /x",
        "declare -n r=CD''PATH; r=/x;",
        "shopt -s cdable_vars",
        "eval 'X=1'",
        "$SET x",
    ],
)
def test_no_cd_is_followed_after_a_builtin_that_may_set_what_cd_reads(
    before: str, tmp_path: Path
) -> None:
    """Attacker round 81: `printf -v CD''PATH /x && cd roots && find default -delete` set
    CDPATH without writing it as such, and the cd was followed as if relative to the cwd."""
    (tmp_path / "roots").mkdir()
    line = f"{before} && cd roots && find default -delete"
    last = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
    assert last["cwd"] == "", line


def test_a_path_through_a_link_is_unknown_where_the_line_removes_or_makes_names(
    tmp_path: Path,
) -> None:
    """Attacker round 81: `rm L && mkdir L && find L/.. -delete` turned the link L (to a/b/c)
    into a folder, so `L/..` was the workspace when it ran, not a/b as the disk said."""
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "L").symlink_to("a/b/c")
    for line in ("rm L && mkdir L && find L/.. -delete", "find L/.. -delete & rm L; mkdir L"):
        facts = command_facts(parse_command(line), str(tmp_path), str(tmp_path))
        [find] = [fact for fact in facts if fact["name"] == "find"]
        assert find["words"][0]["path"] == "", line
    [written] = _written("rm L && mkdir L && echo x > L/../.gitmodules", str(tmp_path))
    assert not written["known"]
    # No link on the way: known as before.
    facts = command_facts(parse_command("rm -f x && ls a/b"), str(tmp_path), str(tmp_path))
    assert facts[-1]["words"][0]["path"] == f"{tmp_path}/a/b"


@pytest.mark.parametrize(
    "line",
    [
        "! cd nope && find ../ws -delete",  # negated: what follows runs although it failed
        "cd() { :; }; cd sub && find ../ws -delete",  # a function named cd
        "function cd { :; }; cd sub && find ../ws -delete",
        "cd() ( : ) && cd sub && find ../ws -delete",
        "f() { :; }; cd sub && find ../ws -delete",  # any function may be called cd's way
    ],
)
def test_a_cd_that_may_not_go_where_it_says_is_not_followed(line: str, tmp_path: Path) -> None:
    """Attacker round 82: `! cd nope && x` runs x where the line started, and so does a line
    that defines a function named cd; both were followed, and `find ../<ws> -delete` emptied
    the workspace the policy took for a subfolder."""
    (tmp_path / "sub").mkdir()
    last = command_facts(parse_command(line), str(tmp_path), str(tmp_path))[-1]
    assert last["cwd"] == "", line


@pytest.mark.parametrize(
    ("program", "then_in"),
    [("./cd", "start"), ("sub/../cd", "start"), ("/usr/bin/cd", "start"), ("./pushd", "start"),
     ("$C", "unknown"), ("$PWD/cd", "unknown")],
)  # fmt: skip
def test_a_program_named_like_a_directory_builtin_does_not_move_the_shell(
    program: str, then_in: str, tmp_path: Path
) -> None:
    """Attacker round 83: `./cd a/b && rm -rf ../<ws>` was taken for the builtin, so the rm
    was judged from a/b (deleting a/<ws>, which does not exist) while bash ran it in the
    workspace, which it emptied. A program of the model's may also have made links."""
    (tmp_path / "sub").mkdir()
    facts = command_facts(
        parse_command(f"{program} sub && find ../ws -delete"), str(tmp_path), str(tmp_path)
    )
    assert facts[-1]["cwd"] == (str(tmp_path) if then_in == "start" else "")
    assert facts[-1]["words"][0]["path"] == ""


@pytest.mark.parametrize(
    "line",
    [
        "./echo && ls L/a",  # the model's program named echo: it may have made L
        "bin/touch x && ls L/a",
        "PATH=.:$PATH && rm x && ls L/a",  # a bare rm that is the model's
        "export PATH=.:$PATH && mkdir x && ls L/a",
        "PATH=. sleep 1 && ls L/a",
    ],
)
def test_a_program_named_like_one_that_makes_no_links_may_make_them(
    line: str, tmp_path: Path
) -> None:
    (tmp_path / "L").mkdir()
    facts = command_facts(parse_command(line), str(tmp_path), str(tmp_path))
    assert facts[-1]["words"][0]["path"] == "", line


@pytest.mark.parametrize("program", ["echo", "/bin/echo", "/usr/bin/echo", "rm -f x", "/bin/rm x"])
def test_the_shell_s_own_and_the_image_s_programs_keep_paths_known(
    program: str, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    facts = command_facts(parse_command(f"{program} && ls a"), str(tmp_path), str(tmp_path))
    assert facts[-1]["words"][0]["path"] == f"{tmp_path}/a"


@pytest.mark.parametrize(
    "line",
    [
        "f() { rm -rf L/ws; }; ln -s .. L && f",  # a function runs where it is called
        "for i in 1 2; do test $i = 2 && rm -rf L/ws; ln -sfn .. L; done",  # a loop: again
        "while true; do rm -rf L/ws; ln -s .. L; done",
        "(sleep 1; rm -rf L/ws) & ln -s .. L",  # the background: beside the rest
        "rm -rf L/ws | ln -s .. L",  # pipeline stages run side by side
        "./find . -name x && rm -rf L/ws",  # a `find` of the model's (it made L)
        "export PATH=.:$PATH && cat a.txt && rm -rf L/ws",  # a `cat` PATH finds in the workspace
    ],
)
def test_a_link_the_line_may_make_before_a_path_is_used_makes_it_unknown(
    line: str, tmp_path: Path
) -> None:
    """Attacker round 84: each of these emptied the workspace while the policy allowed it, the
    rm's `L/<ws>` judged as a folder inside the workspace: L did not exist yet, and the command
    that made it (-> ..) was written after the rm, or taken for one that only reads."""
    facts = command_facts(parse_command(line), str(tmp_path), str(tmp_path))
    [rm] = [fact for fact in facts if fact["name"] == "rm"]
    assert [word["path"] for word in rm["words"] if word["text"] == "L/ws"] == [""], line


def test_a_command_that_runs_before_any_link_is_made_keeps_its_paths(tmp_path: Path) -> None:
    facts = command_facts(
        parse_command("rm -rf build && ln -s x y && ls a"), str(tmp_path), str(tmp_path)
    )
    assert facts[0]["words"][1]["path"] == f"{tmp_path}/build"
    assert facts[-1]["words"][0]["path"] == ""


@pytest.mark.parametrize(
    "line",
    ["./find .", "bin/cat x", "f() { :; }; cat x", "PATH=.:$PATH; cat x", "export PATH=. && ls"],
)
def test_readers_of_the_model_s_are_not_taken_for_the_image_s(line: str, tmp_path: Path) -> None:
    parsed = parse_command(line)
    assert not is_read_only(parsed)
    facts = command_facts(parsed, str(tmp_path), str(tmp_path))
    assert not any(fact["reads_only"] for fact in facts if fact["name"] in ("find", "cat", "ls"))


@pytest.mark.parametrize(
    "line",
    [
        'rm -rf L/ws 2>"$(ln -s .. L)log"',  # a redirection's substitution runs first
        'X="$(ln -s .. L)" rm -rf L/ws',  # and an assignment's
        'rm -rf L/ws <<< "$(ln -s .. L)"',
        "setsid -f sh -c 'sleep 1; rm -rf L/ws'; ln -s .. L",  # a detached job, no `&`
        "nohup sh -c 'rm -rf L/ws' & ln -s .. L",
    ],
)
def test_a_link_made_by_what_runs_first_or_beside_makes_a_path_unknown(
    line: str, tmp_path: Path
) -> None:
    """Attacker round 85: the substitutions of a command run before it but are listed after it,
    and `setsid -f` puts a job beside the rest of the line: each emptied the workspace while
    the policy allowed it."""
    facts = command_facts(parse_command(line), str(tmp_path), str(tmp_path))
    [rm] = [fact for fact in facts if fact["name"] == "rm"]
    assert [word["path"] for word in rm["words"] if word["text"] == "L/ws"] == [""], line


@pytest.mark.parametrize(
    "line",
    [
        "eval $'sleep 2 \\x26\\x26 rm -rf L/ws \\x26'; ln -s .. L",  # `&` only once decoded
        "bash -c 'rm -rf L/ws & ln -s .. L'",
        "sh -c \"$(printf 'x')\" ; eval 'rm -rf L/ws &' ; ln -s .. L",
    ],
)
def test_a_background_job_in_a_string_the_line_runs_is_seen(line: str, tmp_path: Path) -> None:
    """Attacker round 86: `eval $'... rm -rf L/<ws> \\x26'; ln -s .. L` has no `&` in its text,
    and emptied the workspace while the policy allowed it."""
    parsed = parse_command(line)
    assert parsed.runs_in_background
    facts = command_facts(parsed, str(tmp_path), str(tmp_path))
    [rm] = [fact for fact in facts if fact["name"] == "rm"]
    assert [word["path"] for word in rm["words"] if word["text"] == "L/ws"] == [""], line


def test_and_lists_and_stderr_pipes_are_not_background_jobs() -> None:
    for line in ("a && b", "a |& b", "a 2>&1", "a &> f", "a >& f"):
        assert not parse_command(line).runs_in_background, line
