"""A git command line read the way git reads it: global options (the directory it works in,
configuration overrides), the subcommand, and the subcommand's options with abbreviations
spelled out and short clusters split, so `git push --forc`, `git push -fq` and
`git -c alias.p='push -f' p` are seen for what they do.

git accepts any unambiguous prefix of a long option; an ambiguous one is an error (git does not
run), so it is left as written. Options of subcommands whose table is not here are left as
written too; the policy treats what it cannot read with suspicion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.shell.paths import normalised

#: Global options that take the next word as their value (or `--opt=value`).
_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix",
     "--exec-path", "--list-cmds", "--attr-source"}
)  # fmt: skip
#: Global options that change what git runs or where it looks, beyond -C and -c.
_GLOBAL_REDIRECTING = frozenset(
    {"--git-dir", "--work-tree", "--namespace", "--config-env", "--exec-path", "--super-prefix",
     "--attr-source"}
)  # fmt: skip
_GLOBAL_FLAGS = frozenset(
    {"-p", "-P", "--paginate", "--no-pager", "--bare", "--no-replace-objects",
     "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs",
     "--no-optional-locks", "--no-advice", "--html-path", "--man-path", "--info-path",
     "-v", "--version", "-h", "--help"}
)  # fmt: skip

#: git's own commands (those of `git help -a` a model uses); anything else may be an alias
#: from a configuration file the policy cannot see, or a `git-<name>` program.
BUILTINS = frozenset(
    {"add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bundle",
     "cat-file", "check-attr", "check-ignore", "checkout", "cherry", "cherry-pick", "clean",
     "clone", "commit", "config", "count-objects", "describe", "diff", "diff-files",
     "diff-index", "diff-tree", "fetch", "for-each-ref", "format-patch", "fsck", "gc", "grep",
     "hash-object", "help", "init", "log", "ls-files", "ls-remote", "ls-tree", "merge",
     "merge-base", "mv", "name-rev", "notes", "pull", "push", "range-diff", "rebase", "reflog",
     "remote", "repack", "replace", "reset", "restore", "rev-list", "rev-parse", "revert", "rm",
     "shortlog", "show", "show-branch", "show-ref", "sparse-checkout", "stash", "status",
     "submodule", "switch", "symbolic-ref", "tag", "update-index", "update-ref", "var",
     "verify-commit", "verify-tag", "version", "whatchanged", "worktree", "write-tree",
     "filter-branch", "maintenance", "prune", "lfs"}
)  # fmt: skip


@dataclass(frozen=True)
class _Options:
    """A subcommand's options: short letters (those taking a value), and long names."""

    short: str
    short_with_value: str
    long: tuple[str, ...]


_SUBCOMMAND_OPTIONS: dict[str, _Options] = {
    "push": _Options(
        "fdnquv46", "o",
        ("all", "branches", "mirror", "tags", "follow-tags", "atomic", "dry-run", "porcelain",
         "delete", "prune", "force", "force-with-lease", "no-force-with-lease",
         "force-if-includes", "no-force-if-includes", "repo", "set-upstream", "thin", "no-thin",
         "quiet", "verbose", "progress", "no-verify", "verify", "recurse-submodules",
         "push-option", "signed", "no-signed", "receive-pack", "exec", "ipv4", "ipv6"),
    ),
    "reset": _Options(
        "qpN", "",
        ("soft", "mixed", "hard", "merge", "keep", "quiet", "no-quiet", "patch", "intent-to-add",
         "recurse-submodules", "no-recurse-submodules", "pathspec-from-file",
         "pathspec-file-nul", "no-refresh", "refresh"),
    ),
    "clean": _Options(
        "dfinqxX", "e",
        ("dry-run", "force", "interactive", "quiet", "exclude"),
    ),
    "branch": _Options(
        "dDfmMcCrailqv", "tu",
        ("delete", "force", "move", "copy", "remotes", "all", "list", "quiet", "verbose",
         "track", "no-track", "set-upstream-to", "unset-upstream", "edit-description",
         "contains", "no-contains", "merged", "no-merged", "sort", "points-at", "format",
         "column", "no-column", "color", "no-color", "abbrev", "no-abbrev", "show-current",
         "ignore-case", "create-reflog", "recurse-submodules", "omit-empty"),
    ),
    "checkout": _Options(
        "fmqpl", "bBt",
        ("force", "merge", "quiet", "patch", "ours", "theirs", "detach", "orphan", "track",
         "no-track", "guess", "no-guess", "overwrite-ignore", "no-overwrite-ignore",
         "ignore-other-worktrees", "recurse-submodules", "no-recurse-submodules", "progress",
         "no-progress", "conflict", "pathspec-from-file", "pathspec-file-nul",
         "overlay", "no-overlay", "ignore-skip-worktree-bits"),
    ),
    "switch": _Options(
        "fmqt", "cCd",
        ("create", "force-create", "detach", "guess", "no-guess", "force", "discard-changes",
         "merge", "conflict", "quiet", "progress", "no-progress", "track", "no-track",
         "orphan", "ignore-other-worktrees", "recurse-submodules", "no-recurse-submodules"),
    ),
    "restore": _Options(
        "pqSW", "s",
        ("source", "patch", "worktree", "staged", "quiet", "progress", "no-progress", "ours",
         "theirs", "merge", "conflict", "ignore-unmerged", "ignore-skip-worktree-bits",
         "recurse-submodules", "no-recurse-submodules", "overlay", "no-overlay",
         "pathspec-from-file", "pathspec-file-nul"),
    ),
    "gc": _Options("q", "", ("aggressive", "auto", "prune", "no-prune", "quiet", "force",
                             "keep-largest-pack", "cruft", "no-cruft")),
    "tag": _Options("adfsulnv", "mFx", ("annotate", "delete", "force", "sign", "local-user",
                                        "list", "verify", "message", "file", "contains")),
}  # fmt: skip


@dataclass(frozen=True)
class GitInvocation:
    """A git command line as git reads it."""

    directory: str
    """Where it works (its -C options applied to the command's directory); empty: unknown."""
    config: tuple[str, ...]
    """Its `-c name=value` overrides (an alias or a hook can hide in one)."""
    redirected: bool
    """It names another repository, work tree, configuration or program directory
    (--git-dir, --work-tree, --exec-path, --config-env, ...)."""
    subcommand: str
    """The first word after the global options; empty when there is none or it is dynamic."""
    known: bool
    """The subcommand is one of git's own (else an alias or an external `git-<name>`)."""
    options: tuple[str, ...]
    """The subcommand's options: long ones spelled out (`--force`), `--name=value` kept whole,
    short clusters split (`-f`, `-d`)."""
    operands: tuple[str, ...]
    args: tuple[str, ...]
    """Everything after the subcommand, as written."""
    dynamic: bool
    """A word before or of the subcommand, or an option, is only known at run time."""

    def to_policy(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "config": list(self.config),
            "redirected": self.redirected,
            "subcommand": self.subcommand,
            "known": self.known,
            "options": list(self.options),
            "operands": list(self.operands),
            "args": list(self.args),
            "dynamic": self.dynamic,
        }


def parse_git(argv: Sequence[str], dynamic: Sequence[bool], cwd: str) -> GitInvocation:
    """Read `git ...` (argv with the program first) from the directory `cwd`."""
    words = list(argv[1:])
    flags = list(dynamic[1:]) if dynamic else [False] * len(words)
    directory, config, redirected, unknown = cwd, [], False, False
    i = 0
    while i < len(words) and words[i].startswith("-"):
        name, has_value, value = _split(words[i])
        if flags[i]:
            unknown = True
        if name in _GLOBAL_WITH_VALUE:
            if not has_value:
                i += 1
                value = words[i] if i < len(words) else ""
                unknown = unknown or (i < len(flags) and flags[i])
            if name == "-C" and ".." in value.split("/"):
                # git goes there with chdir, through links: `L/..` is the folder above where L
                # leads, not the one above L (attacker round 80, for cd).
                directory = ""
            elif name == "-C":
                directory = normalised(directory, value) if value else directory
            elif name == "-c":
                config.append(value)
            redirected = redirected or name in _GLOBAL_REDIRECTING
        elif name not in _GLOBAL_FLAGS:
            unknown = True
        i += 1
    subcommand = words[i] if i < len(words) and not flags[i] else ""
    unknown = unknown or (i < len(words) and flags[i])
    args = tuple(words[i + 1 :])
    options, operands, dynamic_option = _read_args(subcommand, args, flags[i + 1 :])
    return GitInvocation(
        directory=directory,
        config=tuple(config),
        redirected=redirected,
        subcommand=subcommand,
        known=subcommand in BUILTINS,
        options=options,
        operands=operands,
        args=args,
        dynamic=unknown or dynamic_option,
    )


def _split(word: str) -> tuple[str, bool, str]:
    name, sep, value = word.partition("=") if word.startswith("--") else (word, "", "")
    if not sep and len(word) > 2 and word[:2] in ("-C", "-c"):
        return word[:2], True, word[2:]  # `-C/path`, `-cname=value`
    return name, bool(sep), value


def _read_args(
    subcommand: str, args: tuple[str, ...], dynamic: Sequence[bool]
) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    table = _SUBCOMMAND_OPTIONS.get(subcommand)
    options: list[str] = []
    operands: list[str] = []
    dynamic_option = False
    i = 0
    over = False
    while i < len(args):
        word = args[i]
        is_dynamic = i < len(dynamic) and dynamic[i]
        if over or not word.startswith("-") or word == "-":
            operands.append(word)
        elif word == "--":
            over = True
        elif word.startswith("--"):
            dynamic_option = dynamic_option or is_dynamic
            options.append(_spelled_out(word, table))
        else:
            dynamic_option = dynamic_option or is_dynamic
            split, takes_next = _short_cluster(word, table)
            options += split
            if takes_next and i + 1 < len(args):
                i += 1
                options[-1] += "=" + args[i]
        i += 1
    return tuple(options), tuple(operands), dynamic_option


def _spelled_out(word: str, table: _Options | None) -> str:
    name, sep, value = word[2:].partition("=")
    if table is None or name in table.long:
        return word
    matches = [full for full in table.long if full.startswith(name)]
    if len(matches) != 1:
        return word  # unknown, or ambiguous: git refuses to run it
    return f"--{matches[0]}{sep}{value}"


def _short_cluster(word: str, table: _Options | None) -> tuple[list[str], bool]:
    """`-fd` as ["-f", "-d"]; a letter that takes a value ends the cluster (its value is the
    rest, or the next word). Unknown letters keep the cluster whole."""
    if table is None:
        return [word], False
    letters = word[1:]
    split: list[str] = []
    for at, letter in enumerate(letters):
        if letter in table.short_with_value:
            rest = letters[at + 1 :]
            split.append(f"-{letter}" + (f"={rest}" if rest else ""))
            return split, not rest
        if letter not in table.short:
            return [word], False
        split.append(f"-{letter}")
    return split, False
