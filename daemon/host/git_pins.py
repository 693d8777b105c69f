"""Which paths of a workspace hold its repository, for the sandbox to mount read-only over
themselves (the policy's `sandbox.git: read_only`).

The repository is what the owner's git on the host reads when run at the workspace's root:
- `.git` (a directory, or a file naming the directory git uses), the directory such a file names
  when it lies inside the workspace, and the common directory that one names in turn (a linked
  worktree's);
- each submodule the index records, since `git status` at the root runs git in every one that
  has a `.git`: a checked-out submodule's `.git` (and the directory it names, when outside the
  repository already held), and an empty submodule's directory itself, read-only, so that no
  `.git` can be put there; recursively, through each submodule's own index;
- what each repository's configuration names in the workspace that git runs or reads as
  configuration (attacker round 67: husky's `core.hooksPath = .husky/_`, a shared
  `include.path = ../.gitconfig`): the hooks directory and each included file (recursively, each
  once) read-only, and each file a configured command names (`filter.x.clean = tools/clean %f`,
  `alias.t = !scripts/t`, the script of `sh strip.sh`, git's own `-c key=value`); one it would
  run that is missing is refused (the model could make it), as is a command that computes its
  words when it runs (`$(...)`, `$VAR`). What such a program reads in turn (its modules, other
  scripts) is not known here, nor what the global and system configuration of whoever runs git
  names;
- what git follows through links from a hooks directory (round 69): a hook linked to a
  work-tree script, `.git/hooks` itself a link to a work-tree folder;
- when the workspace is a folder of a larger repository (git run there finds the repository
  above), what that repository names inside the workspace, the same way; its `.git` must be a
  directory, whose files are read whoever owns them when it is root's (nothing the model writes
  named them), and only where they are the workspace owner's when it is the owner's.
A pinned directory deeper than the root's children gets each directory on its way pinned too
(mounted over itself, writable): a mount point cannot be renamed, so no ancestor can be moved
aside and replaced with one holding another repository.

Everything is looked at through the pinned workspace, never following a symbolic link (the
kernel's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); what cannot be looked at that way is refused,
not guessed: a `.git` that is a link, a named directory reached through one, or one that does
not exist (the model could make it), an index that does not parse, a submodule whose directory
is missing. A git directory outside the workspace (a linked worktree's) is in no container and
is not pinned, but its index and configuration are read for its submodules, once it has shown
that it belongs to this work tree: its `gitdir` file (a linked worktree's) or its
`core.worktree` (a submodule's, a separate git directory's) names it back. Until then a `.git`
file could be the model's, naming any host path, so nothing there is told apart: whether missing,
a link, another user's or another tenant's repository, the refusal is the same. Only files of the
workspace's owner are read outside, reached without any symbolic link.

An index is parsed by one thread at a time (a parse holds the interpreter: several at once would
starve the event loop), and what parsing found is kept, within a budget, until the file changes.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import posixpath
import re
import shlex
import stat
import threading
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from daemon.errors import ToolError
from daemon.host.git_config import UnreadableConfig, config_entries
from daemon.host.git_index import GitIndex, UnreadableIndex, read_index
from daemon.host.pinned import PinnedDirectory
from sandbox.backend import GIT_DIR_NAME, PathPin
from sandbox.openat2 import AT_FDCWD, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, openat2

GIT_FILE_MAX_BYTES = 4096
"""A `.git` file or `commondir` longer than this is not one git wrote."""
CONFIG_MAX_BYTES = 1 << 20
INDEX_MAX_BYTES = 64 << 20
MODEL_INDEX_MAX_BYTES = 8 << 20
"""The largest index of a repository the model made that is parsed (about 100,000 files, some
50 ms): a larger one is taken as recording a submodule, and the repository is never vouched for
(attacker round 141: a 64 MB one, touched every 0.3 s, was parsed for 0.42 s, one parse at a
time in the daemon, before and after every other tenant's call in a shared workspace)."""
"""About 800,000 files' worth (read whole, once per change, in about half a second); a larger
index is refused."""
MAX_PINS = 256
"""Past this many pinned paths (submodules), the repository is refused, not half held."""
MAX_SUBMODULE_DEPTH = 8
MAX_INCLUDE_DEPTH = 10
"""git's own limit on nested includes."""
_GITDIR_PREFIX = "gitdir: "
MAX_CONFIG_FILES = 64
"""Configuration files one look reads (each once), at most: past that it is refused."""
_COMMAND_NAMES = frozenset(
    {
        "fsmonitor", "pager", "editor", "sshcommand", "askpass", "textconv", "clean", "smudge",
        "process", "driver", "helper", "program", "path", "difffilter", "packobjectshook",
        "gitproxy", "smtpserver", "receivepack", "uploadpack", "external", "tunnel",
    }
)  # fmt: skip
"""Names of configuration variables whose value git runs (as do those ending in `cmd` or
`command`): each file of the work tree such a command names is held read-only, and one it would
run that is missing is refused."""
_INTERPRETER = re.compile(
    r"(?:sh|bash|dash|zsh|ksh|fish|pwsh|tclsh|Rscript|deno|bun|tsx|ts-node"
    r"|python|node|nodejs|perl|ruby|php|lua)[0-9.]*"
)
"""Programs whose first argument that is not an option is a script they run (a version in the
name included: python3.11, node20)."""
_CODE_OPTIONS = {"-c": None, "-m": None, "--eval": None, "--command": None, "-e": "nodeperlruby"}
"""Options after which an interpreter runs code or a module, not a script file (`-e` only for
those named: for a shell it means "stop at the first error")."""
_VALUE_OPTIONS = frozenset({"-X", "-W", "-r", "--require", "-I", "--import", "--loader", "-f"})
"""Options that take the next word as their value (a module, a file), not a script."""
MAX_HOOK_ENTRIES = 4096
_WORDS = re.compile(r"""[\s;|&()<>{}'"]+""")
_COMPUTED = re.compile(r"[$`]")
_OPERATORS = "();<>|&"
INDEX_CACHE_BYTES = 16 << 20
"""What the submodule paths of cached indexes may take, at most."""

_IndexKey = tuple[int, int, int, int, int, int]
_Found = TypeVar("_Found")


class _IndexCache:
    """Parsed indexes by (device, inode, size, mtime, ctime, the object names' length): a write
    changes ctime, whatever is done to mtime afterwards. The oldest go first once the paths
    kept pass `INDEX_CACHE_BYTES`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[_IndexKey, tuple[GitIndex, int]] = {}
        self._bytes = 0

    def get(self, key: _IndexKey) -> GitIndex | None:
        with self._lock:
            found = self._kept.get(key)
        return None if found is None else found[0]

    def put(self, key: _IndexKey, index: GitIndex) -> None:
        cost = 64 + sum(64 + len(link) for link in index.gitlinks)
        with self._lock:
            if key in self._kept or cost > INDEX_CACHE_BYTES:
                return
            while self._kept and self._bytes + cost > INDEX_CACHE_BYTES:
                self._bytes -= self._kept.pop(next(iter(self._kept)))[1]
            self._kept[key] = (index, cost)
            self._bytes += cost


_index_cache = _IndexCache()
_parse_lock = threading.Lock()


ModelMark = tuple[str, int, int, tuple[tuple[str, int, int, int], ...]]
"""What the model made at the root that git takes for a repository: its name, device and
inode, and what git would run of it (`_Pins._what_git_runs`)."""


class RepositoryLook(NamedTuple):
    """What holds the workspace's repository, and what of it is the model's own."""

    pins: tuple[PathPin, ...]
    """Paths to hold read-only (`git_pins`)."""
    models: tuple[ModelMark, ...]
    """What sandbox identities alone made at the workspace's root that git takes for a
    repository (a `.git` of any kind, or a git-directory layout): the model's own, not held,
    and looked at again after each call (its making, and a change of what git would run of
    it, are audited)."""


def git_pins(
    root: PinnedDirectory, made_by_sandboxes: Callable[[int], bool] = lambda uid: False
) -> tuple[PathPin, ...]:
    """The pins that keep the workspace's repository read-only, and what a repository above it
    names inside it; () when neither it nor a folder above has a `.git` (a repository made in
    the sandbox is the model's own).

    Raises:
        ToolError: Part of the repository is a link, missing, or cannot be read: nothing may
            run, since the sandbox could not hold it read-only.
    """
    return repository_look(root, made_by_sandboxes).pins


def repository_look(
    root: PinnedDirectory, made_by_sandboxes: Callable[[int], bool] = lambda uid: False
) -> RepositoryLook:
    """`git_pins`, and what at the root sandbox identities alone made (`made_by_sandboxes`
    tells the uids only they have): the model's own, as a repository made in the sandbox
    (attacker round 128: holding, or refusing, one a tenant made at the root of the shared
    default workspace stopped or locked every other tenant's calls there). A root it can
    write is all the model needs to make one; holding it afterwards protects nothing of an
    owner's.

    Raises:
        ToolError: as `git_pins`.
    """
    pins = _Pins(root, made_by_sandboxes)
    enclosing = _enclosing_work_tree(root)
    if enclosing is not None:
        pins.enclosing(enclosing)
    pins.repository("", depth=0)
    return RepositoryLook(pins.done(), tuple(pins.models))


def _enclosing_work_tree(root: PinnedDirectory) -> str | None:
    """The nearest folder above the workspace with a `.git`: the repository git run in the
    workspace finds when the workspace has none (and whose configuration still applies to the
    workspace's files when it has one). Only a `.git` of root's or the workspace owner's
    counts: another user's (in a folder anyone may write, such as /tmp) is one git refuses too."""
    here = str(root.path)
    while here != "/":
        here = posixpath.dirname(here)
        try:
            info = os.lstat(posixpath.join(here, GIT_DIR_NAME))
        except OSError:
            continue
        if info.st_uid in (0, root.uid):  # git refuses another owner's too (round 70)
            return here
    return None


class _Pins:
    """The pins found so far, by path (a path pinned read-only stays so)."""

    def __init__(self, root: PinnedDirectory, made_by_sandboxes: Callable[[int], bool]) -> None:
        self._root = root
        self._made_by_sandboxes = made_by_sandboxes
        self.models: list[ModelMark] = []
        """RepositoryLook.models."""
        self._pins: dict[str, PathPin] = {}
        self._read_only_dirs: list[str] = []
        """Workspace-relative directories already held read-only as a whole."""
        self._configs: dict[str, list[tuple[str, str]]] = {}
        self._commons: dict[str, str | None] = {}
        """What this look already read, by path (each is needed more than once)."""
        self._configured_files: set[tuple[str, str]] = set()
        """Configuration files already gone through, with the work tree they were for."""
        self._hook_dirs: set[str] = set()
        """Hooks directories already gone through (links between them may loop)."""
        self._trusted: list[str] = []
        """Git directories outside whose files are read whoever owns them: found above the
        workspace, not named by anything the model could write."""
        self._enclosing: list[str] = []
        """Work trees above the workspace: their hooks folders and links are looked at whoever
        owns them (their configuration, not the model, names them)."""

    def done(self) -> tuple[PathPin, ...]:
        return tuple(self._pins.values())

    def repository(self, work_tree: str, *, depth: int) -> None:
        """Hold the repository whose work tree is `work_tree` ("" for the workspace's root)."""
        dot_git = _join(work_tree, GIT_DIR_NAME)
        info = _lstat(self._root, dot_git)
        if info is None:
            if work_tree:  # an empty submodule: nothing may become its .git
                self._add_way(work_tree, read_only=True)
                return
            self._root_layout()
            return
        folder = dot_git if stat.S_ISDIR(info.st_mode) else None
        if not work_tree and self._theirs([(dot_git, info)], git_dir=folder):
            # Whatever it is (a file naming a git directory, a link): not followed. git skips
            # one that is no repository (an empty folder) and takes the root itself for one
            # when it is laid out so (attacker round 132): that is looked at too, and never
            # vouched for, since which of the two git takes is not told here.
            if self._root_layout():
                self.models.append((GIT_DIR_NAME, 0, 0, (_unvouched(),)))
            return
        if work_tree:
            self._add_way(work_tree, read_only=False)
        if stat.S_ISDIR(info.st_mode):
            self._add(dot_git, info, read_only=True)
            self._git_directory(work_tree, dot_git, depth)
            return
        if not stat.S_ISREG(info.st_mode):
            raise _refused(
                f"The workspace's {dot_git} is a symbolic link (or neither a directory nor a "
                "file), and the sandbox keeps a repository read-only only where it is."
            )
        self._add(dot_git, info, read_only=True)
        git_dir = _named(self._root, self._read(dot_git), work_tree, gitfile=True)
        if git_dir is None:
            return
        if git_dir.startswith("/") and not self._names_back(git_dir, work_tree):
            raise _refused(_NOT_BACK.format(what=_name(dot_git)))
        self._hold(git_dir)
        self._git_directory(work_tree, git_dir, depth)

    def _root_layout(self) -> bool:
        """Whether the root is laid out as a git directory (`_git_directory_layout`) that the
        sandboxes alone made (then noted as the model's, with what git would run from the
        root); False when it is not laid out so. Refused when it is, by another."""
        layout = self._git_directory_layout()
        if layout and not self._theirs(layout, git_dir=""):
            raise _refused(
                "The workspace is laid out as a git directory (a HEAD beside objects, refs "
                "or a commondir file at its root): git run in it takes its configuration and "
                "hooks from there, as a bare repository's."
            )
        return bool(layout)

    def _git_directory_layout(self) -> list[tuple[str, os.stat_result]]:
        """What makes git take the workspace's root itself for a git directory when it has no
        `.git` (attacker round 92): a HEAD beside objects/, refs/ or a commondir file (git looks
        for objects/ and refs/ where that points: round 93), each in any form, since git
        follows what the model may have made a link. More than git needs: refusing is safe.
        [] when the root is not laid out so."""
        head = _lstat(self._root, "HEAD")
        if head is None:
            return []
        found = [(name, _lstat(self._root, name)) for name in ("objects", "refs", "commondir")]
        beside = [(name, info) for name, info in found if info is not None]
        return [("HEAD", head), *beside] if beside else []

    def _theirs(self, made: list[tuple[str, os.stat_result]], *, git_dir: str | None) -> bool:
        """Whether sandbox identities alone made each of `made`; then each is noted as the
        model's, with what git would run from `git_dir` (the git directory they make; None:
        not a folder, not followed, so never vouched for)."""
        if not all(self._made_by_sandboxes(info.st_uid) for _, info in made):
            return False
        runs = self._what_git_runs(git_dir) if git_dir is not None else (_unvouched(),)
        for name, info in made:
            own = () if stat.S_ISDIR(info.st_mode) else (_seen(name, info),)
            self.models.append((name, info.st_dev, info.st_ino, (*own, *runs)))
        return True

    def _what_git_runs(self, git_dir: str) -> tuple[tuple[str, int, int, int], ...]:
        """The files of a git directory the model made that git takes programs from (its
        configuration, its hooks, which repository it is), each as name, inode, size and
        change time (which no one can set back: attacker round 130 put the modification
        time back with utime): filled in or changed by a later call, the look differs and the
        change is audited (round 129: an empty `.git` was recorded, and the hooks and
        configuration written into it afterwards never were). What git would take from
        elsewhere is not followed: the look cannot vouch for it, and differs every time
        (rounds 130 and 131). That is a link, `commondir`, a worktree's configuration,
        `modules/`, a configuration naming a command, an include, `core.hooksPath`, an
        alias, a transport, a hook (it may run a script of the work tree), a submodule in
        the index (git status runs git in it, with its own configuration), a rebase, am,
        cherry-pick or revert under way (its `exec` lines run in whoever continues it: round
        135). The index itself is in the look too, whatever a reader makes of it: crafted so
        that git and this reader read other entries, it hid a submodule (round 134). Nothing
        refused: what cannot be looked at is noted so too."""
        seen: list[tuple[str, int, int, int]] = []
        vouched = True
        config: os.stat_result | None = None
        for name in ("config", "config.worktree", "HEAD", "commondir", "info/attributes",
                     "hooks", "modules", "index", *_SEQUENCES):  # fmt: skip
            try:
                info = _lstat(self._root, _join(git_dir, name))
            except ToolError:
                vouched = False
                continue
            if info is None:
                continue
            seen.append(_seen(name, info))
            config = info if name == "config" else config
            if stat.S_ISLNK(info.st_mode) or name in _NEVER_VOUCHED:
                vouched = False
        hooks = self._hooks_seen(git_dir)
        if hooks is None:
            vouched = False
        else:
            seen.extend(hooks)
            vouched = vouched and all(name.endswith(".sample") for name, *_ in hooks)
        plain, hash_bytes = self._config_verdict(_join(git_dir, "config"), config)
        vouched = vouched and plain and not self._model_gitlinks(git_dir, hash_bytes)
        if not vouched:
            seen.append(_unvouched())
        return tuple(sorted(seen))

    def _hooks_seen(self, git_dir: str) -> list[tuple[str, int, int, int]] | None:
        """The entries of the hooks folder of a git directory the model made ([] when there is
        none); None when they cannot all be vouched for (a link, too many, unreadable)."""
        try:
            fd = self._root.open_beneath(_join(git_dir, "hooks"), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []  # none, or not a folder (its own entry is in the look)
        seen = []
        try:
            with os.scandir(fd) as entries:
                for count, entry in enumerate(entries):
                    info = entry.stat(follow_symlinks=False)
                    if count >= MAX_HOOK_ENTRIES or stat.S_ISLNK(info.st_mode):
                        return None
                    seen.append(_seen(f"hooks/{entry.name}", info))
        except OSError:
            return None
        finally:
            os.close(fd)
        return seen

    def _config_verdict(self, config: str, info: os.stat_result | None) -> tuple[bool, int]:
        """Whether a configuration the model made is plain, and the length of its object
        names. Plain: it names nothing git would run or read beyond it: no command
        (`core.fsmonitor = ./fsm.sh`, whose script a later call may rewrite unseen: round
        129's way), no alias (`-c core.fsmonitor=...` in one: round 131), no include, no
        `core.hooksPath`, no worktree's configuration, no transport that runs a program
        (`ext::`). Unreadable counts as naming something. Once per change of the file (round
        131: a 1 MiB one was parsed twice per call of every tenant)."""
        if info is None:
            return True, 20
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = _configurations.get(key)
        if known is not None:
            return known
        try:
            entries = self._entries(config)
        except ToolError:
            verdict = (False, 20)
        else:
            plain = not any(_beyond_configuration(key, value) for key, value in entries)
            verdict = (plain, _object_name_bytes(dict(entries)))
        if len(_configurations) >= MAX_CONFIG_VERDICTS:
            _configurations.pop(next(iter(_configurations)))
        _configurations[key] = verdict
        return verdict

    def _model_gitlinks(self, git_dir: str, hash_bytes: int) -> bool:
        """Whether the index of a git directory the model made records a submodule (or
        cannot be read: taken as one), read with object names of `hash_bytes`, as git reads it
        (round 134: an index read with SHA-1 names only held plain files for this reader and a
        submodule for git, in a SHA-256 repository)."""
        try:
            index = self._index(_join(git_dir, "index"), hash_bytes, MODEL_INDEX_MAX_BYTES)
        except ToolError:
            return True
        return index is not None and bool(index.gitlinks or index.shared)

    def enclosing(self, work_tree: str) -> None:
        """Hold what the repository whose work tree `work_tree` lies above the workspace names
        inside it: its configuration's hooks, includes and scripts, its hooks' links, its
        submodules (attacker round 69: a session on a folder of a repository wrote the script
        the repository's alias runs). Only a `.git` directory is followed there."""
        dot_git = posixpath.join(work_tree, GIT_DIR_NAME)
        if not stat.S_ISDIR(os.lstat(dot_git).st_mode):
            raise _refused(
                f"The workspace lies inside a repository ({work_tree}) whose .git is not a "
                "directory (a linked worktree's, a submodule's), which the daemon does not "
                "follow. Open the session at that repository's root."
            )
        if os.lstat(dot_git).st_uid == 0:
            # Root's: what it names was named by no account of the host but root. One of the
            # workspace owner's is looked at as the owner's files are (attacker round 129: a
            # user's own `.git` in /tmp named a hooks folder in a root-only folder there).
            self._trusted.append(dot_git)
            self._enclosing.append(work_tree)
        self._git_directory(work_tree, dot_git, depth=0)

    def _git_directory(self, work_tree: str, git_dir: str, depth: int) -> None:
        """Hold what the repository whose git directory is `git_dir` takes from elsewhere: its
        common directory (git reads `commondir` in any git directory), what its configuration
        names, its submodules."""
        common = self._common_dir(git_dir)
        if common is not None:
            self._hold(common)
        hooks = _join(common or git_dir, "hooks")
        if hooks.startswith("/"):
            self._outside_hooks(hooks, default=True)
        else:
            self._hook_directory(hooks)
        self._configured(work_tree, git_dir)
        self._submodules(work_tree, git_dir, depth)

    def _configured(self, work_tree: str, git_dir: str) -> None:
        """Hold what the configuration of the repository whose git directory is `git_dir` names
        in the workspace: git runs it, or reads it as configuration."""
        common = self._common_dir(git_dir)
        for place in dict.fromkeys((git_dir,) if common is None else (common, git_dir)):
            for name in ("config", "config.worktree"):
                self._configuration(_join(place, name), work_tree, depth=0)

    def _configuration(self, path: str, work_tree: str, *, depth: int) -> None:
        if (path, work_tree) in self._configured_files:
            return  # included again: once is enough (attacker round 68: 20^9 includes)
        self._configured_files.add((path, work_tree))
        for key, value in self._entries(path):
            self._entry(posixpath.dirname(path), work_tree, key, value, depth=depth)

    def _entry(self, base: str, work_tree: str, key: str, value: str, *, depth: int) -> None:
        """One configuration entry, of a file in `base` (where its includes are relative to)."""
        section, name = key.partition(".")[0], key.rpartition(".")[2]
        if section in ("include", "includeif") and name == "path":
            self._included(base, value, work_tree, depth)
        elif key == "core.hookspath":
            self._hooks(work_tree, value)
        else:
            self._commands(work_tree, key, value)

    def _entries(self, path: str) -> list[tuple[str, str]]:
        """The entries of a configuration file ([] when it does not exist)."""
        known = self._configs.get(path)
        if known is not None:
            return known
        if len(self._configs) >= MAX_CONFIG_FILES:
            raise _refused(f"The repository has more than {MAX_CONFIG_FILES} configuration files.")
        text = self._read(path, CONFIG_MAX_BYTES)
        try:
            entries = config_entries(text) if text is not None else []
        except UnreadableConfig as exc:
            why = f"{_name(path)} is not a configuration git can read ({exc})."
            raise _refused(why) from exc
        self._configs[path] = entries
        return entries

    def _included(self, base: str, value: str, work_tree: str, depth: int) -> None:
        """A file a configuration in `base` includes, held read-only and read in turn when it
        is in the workspace (git skips one that is missing: the model could make it, so that is
        refused)."""
        target = _pathname(self._root, base, value)
        if target is None or target.startswith("/"):
            return  # the owner's home, or elsewhere: in no container
        if depth >= MAX_INCLUDE_DEPTH:
            raise _refused(
                f"Configuration files include others more than {MAX_INCLUDE_DEPTH} deep."
            )
        self._add_file(target, f"The repository's configuration (include.path {value})")
        self._configuration(target, work_tree, depth=depth + 1)

    def _hooks(self, work_tree: str, value: str) -> None:
        """The hooks directory `core.hooksPath` names, relative to the work tree: read-only
        when in the workspace."""
        target = _pathname(self._root, work_tree, value)
        if target is None:
            return
        if target == "":
            raise _refused("The repository's core.hooksPath is the workspace itself.")
        if target.startswith("/"):
            self._outside_hooks(target)
        else:
            self._hook_directory(target)

    def _commands(self, work_tree: str, key: str, value: str) -> None:
        """Each file of the work tree a configured value names, read-only. For a value git runs
        (from the top of the work tree): one whose words are computed when it runs is refused,
        as is a script it would run that is missing or a link (the model could make it). What
        it gives git with `-c key=value` is configuration too."""
        runs = _runs(key, value)
        if runs or key.startswith("alias."):  # git's own arguments, or a command
            for option_key, option_value in _git_options(value):
                self._entry(work_tree, work_tree, option_key, option_value, depth=0)
        if not runs:
            for word in _path_words(value):
                target = _resolved(self._root, work_tree, word)
                if target and not target.startswith("/") and not self._held(target):
                    with contextlib.suppress(ToolError):  # not a path of the work tree
                        info = _lstat(self._root, target)
                        if info is not None and stat.S_ISREG(info.st_mode):
                            self._add_file(target, f"The repository's {key}")
            return
        if _COMPUTED.search(value):
            raise _refused(
                f"The repository's {key} computes what it runs when it runs ($, `): which files "
                "of the workspace it runs cannot be known."
            )
        for word, script in _command_words(value):
            target = _resolved(self._root, work_tree, word)
            if target is None or target == "" or target.startswith("/"):
                continue
            info = _lstat(self._root, target)  # a link on the way is refused, held or not
            if info is not None and stat.S_ISREG(info.st_mode):
                self._add_file(target, f"The repository's {key}")
            elif (info is None and (script or "/" in word)) or (
                info is not None and stat.S_ISLNK(info.st_mode)
            ):
                what = "missing (the model could make it)" if info is None else "a symbolic link"
                raise _refused(f"The repository's {key} runs {target}, which is {what}.")

    def _add_file(self, relative: str, named_by: str) -> None:
        """A file held read-only, each directory on its way pinned writable (already held when
        it lies in a directory held read-only; a link on its way is refused either way)."""
        info = _lstat(self._root, relative)
        if info is None or not stat.S_ISREG(info.st_mode):
            what = "missing (the model could make it)" if info is None else "not a regular file"
            raise _refused(f"{named_by} names {relative}, which is {what}.")
        if self._held(relative):
            return
        parent = posixpath.dirname(relative)
        if parent:
            self._add_way(parent, read_only=False)
        self._add(relative, info, read_only=True)

    def _hook_directory(self, hooks: str, *, links: int = 0) -> None:
        """A hooks directory of the workspace held read-only, and what git would follow from
        it: the directory itself a link (`.git/hooks -> ../githooks`), or hooks that are links
        (`pre-commit -> ../../scripts/pre-commit.sh`), their targets in the workspace held
        read-only too; one missing is refused (attacker round 69)."""
        if hooks in self._hook_dirs:
            return
        self._hook_dirs.add(hooks)
        link = _link_text(self._root, hooks)
        if link is not None:
            target = _placed(self._root, posixpath.dirname(hooks), link)
            if target.startswith("/"):
                self._outside_hooks(target)  # elsewhere, but its links may lead back in
                return
            if links >= 8 or target == "":
                raise _refused(
                    f"The repository's hooks directory {hooks} is a link git cannot use."
                )
            self._hook_directory(target, links=links + 1)
            return
        info = _lstat(self._root, hooks)
        if info is None or not stat.S_ISDIR(info.st_mode):
            if info is not None or self._held(hooks):
                return  # not a directory git runs anything from, or none can be made there
            raise _refused(
                f"The repository's hooks directory {hooks} is missing (the model could make it)."
            )
        if not self._held(hooks):
            self._add_way(hooks, read_only=True)
        for name in _linked_entries(self._root, hooks):
            entry = _join(hooks, name)
            target = _placed(self._root, hooks, _link_text(self._root, entry) or "")
            if not target.startswith("/"):
                self._add_file(target, f"The hook {entry} (a link)")

    def _outside_hooks(self, hooks: str, *, default: bool = False) -> None:
        """A hooks directory outside the workspace is in no container, but git follows links
        from it (the directory itself a link, hooks that are links), which may lead into the
        workspace: where they lead there is held (round 70: a monorepo's `.githooks` linking to
        a script of the folder a session was opened on). One that cannot be looked at is
        refused, unless it is the `default` one of a git directory already read (the owner's):
        a folder missing there says nothing of anyone else's."""
        where = self._followed(hooks)
        if not where.startswith("/"):
            if where:
                self._hook_directory(where)
            return
        if where in self._hook_dirs:
            return
        self._hook_dirs.add(where)
        fd = self._outside(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOCTTY)
        if fd is None:
            if self._is_trusted(where) or (default and where == hooks):
                return  # the repository's own git directory has no hooks folder: none run
            raise _refused(_OUTSIDE_HOOKS)
        try:
            names = _links_at(fd, where)
        finally:
            os.close(fd)
        for name in names:
            target = self._followed(posixpath.join(where, name))
            if target and not target.startswith("/"):
                self._add_file(target, f"A hook outside the workspace ({name}, a link)")

    def _followed(self, path: str) -> str:
        """Where the links at `path` (outside the workspace) lead, one at a time, as far as
        the first path inside the workspace (workspace-relative: what is there is for the
        caller to hold or refuse, links included) or the first one outside that is no link
        (absolute)."""
        for _ in range(8):
            link = self._outside_link(path)
            if link is None:
                return path
            path = _placed(self._root, posixpath.dirname(path), link)
            if not path.startswith("/"):
                return path
        return path

    def _outside(self, path: str, flags: int) -> int | None:
        """`path` (absolute, outside the workspace) open with `flags`, reached without a link
        on the way, and only when it is the workspace owner's or in the repository's own git
        directory; None otherwise, whatever the reason. The daemon (root, often) looking by name
        told its caller what exists where: through a link `M -> /root/<guess>/../..`, a hooks
        folder opened only when `<guess>` existed (attacker round 116)."""
        try:
            fd = openat2(AT_FDCWD, path, flags, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        except OSError:
            return None
        if os.fstat(fd).st_uid != self._root.uid and not self._is_trusted(path):
            os.close(fd)
            return None
        return fd

    def _outside_link(self, path: str) -> str | None:
        """The text of the link at `path` outside the workspace, when it is the workspace
        owner's (or the repository's own) in a folder `_outside` opens; None otherwise (taken
        as no link)."""
        folder = self._outside(posixpath.dirname(path), os.O_PATH | os.O_DIRECTORY)
        if folder is None:
            return None
        name = posixpath.basename(path)
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                return None
            if info.st_uid != self._root.uid and not self._is_trusted(path):
                return None
            return os.readlink(name, dir_fd=folder)
        except OSError:
            return None
        finally:
            os.close(folder)

    def _is_trusted(self, path: str) -> bool:
        """Whether `path` lies in a repository found above the workspace (named by nothing the
        model wrote): looked at whoever owns it."""
        places = (*self._trusted, *self._enclosing)
        return any(path == place or path.startswith(f"{place}/") for place in places)

    def _names_back(self, git_dir: str, work_tree: str) -> bool:
        """Whether the git directory outside, `git_dir`, is this work tree's: its `gitdir` file
        names the work tree's `.git`, or its `core.worktree` the work tree, in so many words
        (compared as text: resolving them would look at the folders they pass through, as root,
        and tell whether those exist; the workspace's path has no link, and git writes real
        paths). False too when anything on the way cannot be read: why is not told."""
        tree = posixpath.normpath(posixpath.join(str(self._root.path), work_tree))
        try:
            back = self._read(_join(git_dir, "gitdir"))
            if back is not None:
                named, expected = back.strip(), posixpath.join(tree, GIT_DIR_NAME)
            else:
                named = dict(self._entries(_join(git_dir, "config"))).get("core.worktree", "")
                expected = tree
        except ToolError:
            return False
        return bool(named) and posixpath.normpath(posixpath.join(git_dir, named)) == expected

    def _common_dir(self, git_dir: str) -> str | None:
        """The directory `git_dir/commondir` names (a linked worktree's main git directory).
        One outside the workspace is taken only as the one a linked worktree's git directory
        lies in (`<common>/worktrees/<name>`): any git directory could be the model's (one
        outside in a workspace of another of its sessions), naming any host path."""
        if git_dir in self._commons:
            return self._commons[git_dir]
        common = _named(self._root, self._read(_join(git_dir, "commondir")), git_dir, gitfile=False)
        outside = common is not None and common.startswith("/")
        if outside and not (
            git_dir.startswith("/") and posixpath.dirname(git_dir) == f"{common}/worktrees"
        ):
            raise _refused(_NOT_BACK.format(what=_name(_join(git_dir, "commondir"))))
        self._commons[git_dir] = common
        return common

    def _hold(self, git_dir: str) -> None:
        """A directory a `.git` file or `commondir` names, held read-only when inside the
        workspace (outside, it is in no container)."""
        if not git_dir.startswith("/") and not self._held(git_dir):
            self._add_way(git_dir, read_only=True)

    def _submodules(self, work_tree: str, git_dir: str, depth: int) -> None:
        if depth >= MAX_SUBMODULE_DEPTH:
            raise _refused(f"Submodules are nested more than {MAX_SUBMODULE_DEPTH} deep.")
        for path in self._gitlinks(git_dir):
            parts = path.split("/")
            if (
                path.startswith("/")
                or any(p in ("", ".", "..", GIT_DIR_NAME) for p in parts)
                or not path.isprintable()  # also bytes that are not UTF-8 (no mount names them)
            ):
                raise _refused(f"The index of {git_dir} records a submodule at {path!r}.")
            inside = _placed(self._root, work_tree, path) if work_tree.startswith("/") else None
            if inside is None:
                self.repository(_join(work_tree, path), depth=depth + 1)
            elif inside and not inside.startswith("/"):  # a repository above's, in here
                self.repository(inside, depth=depth + 1)
            elif inside == "" and _lstat(self._root, GIT_DIR_NAME) is None:
                raise _refused(
                    f"The workspace is a submodule of the repository above ({work_tree}) that is "
                    "not checked out: no .git can be kept from being made here, and that "
                    "repository's git status would run one (attacker round 70). Check it out "
                    "(git submodule update --init), or open the session at the repository's root."
                )

    def _held(self, relative: str) -> bool:
        """Whether `relative` lies in a directory already held read-only as a whole."""
        return any(relative == d or relative.startswith(d + "/") for d in self._read_only_dirs)

    def _add_way(self, relative: str, *, read_only: bool) -> None:
        """Each directory on the way to `relative` pinned writable, `relative` as asked."""
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            here = "/".join(parts[:depth])
            info = _lstat(self._root, here)
            if info is None or not stat.S_ISDIR(info.st_mode):
                what = (
                    "missing (the model could make it)"
                    if info is None
                    else "a symbolic link"
                    if stat.S_ISLNK(info.st_mode)
                    else "not a directory"
                )
                raise _refused(f"The repository needs {relative} held, and {here} is {what}.")
            self._add(here, info, read_only=read_only and depth == len(parts))

    def _add(self, relative: str, info: os.stat_result, *, read_only: bool) -> None:
        known = self._pins.get(relative)
        if known is not None and (known.read_only or not read_only):
            return
        if len(self._pins) >= MAX_PINS:
            raise _refused(f"The repository needs more than {MAX_PINS} paths held.")
        self._pins[relative] = PathPin(
            path=str(self._root.path / relative),
            identity=(info.st_dev, info.st_ino),
            read_only=read_only,
        )
        if read_only and stat.S_ISDIR(info.st_mode):
            self._read_only_dirs.append(relative)

    def _gitlinks(self, git_dir: str) -> tuple[str, ...]:
        """The submodule paths the index of `git_dir` records (its shared part's too)."""
        config = dict(self._entries(_join(git_dir, "config")))
        common = self._common_dir(git_dir)
        if not config and common:  # a linked worktree's configuration is its common directory's
            config = dict(self._entries(_join(common, "config")))
        hash_bytes = _object_name_bytes(config)
        index = self._index(_join(git_dir, "index"), hash_bytes)
        if index is None:
            return ()
        links = index.gitlinks
        if index.shared:
            shared = self._index(_join(git_dir, f"sharedindex.{index.shared}"), hash_bytes)
            if shared is None:
                raise _refused(f"The split index of {git_dir} names a shared part that is missing.")
            links = (*links, *shared.gitlinks)
        return tuple(dict.fromkeys(links))

    def _index(
        self, path: str, hash_bytes: int, max_bytes: int = INDEX_MAX_BYTES
    ) -> GitIndex | None:
        """An index, parsed (once per change: cached by device, inode, size and both times)."""
        fd = self._open(path)
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                raise _refused(f"{_name(path)} is not an index git could have written.")
            # The names' length is in the key: one file reads differently with each (round 134).
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
                   hash_bytes)  # fmt: skip
            found = _index_cache.get(key)
            if found is not None:
                return found
            with _parse_lock:
                found = _index_cache.get(key)  # parsed by another thread meanwhile
                if found is None:
                    try:
                        found = read_index(_read_all(fd, info.st_size), hash_bytes)
                    except UnreadableIndex as exc:
                        why = f"{_name(path)} cannot be read as an index ({exc})."
                        raise _refused(why) from exc
                    _index_cache.put(key, found)
            return found
        finally:
            os.close(fd)

    def _read(self, path: str, limit: int = GIT_FILE_MAX_BYTES) -> str | None:
        """A small text file of a repository (None: it does not exist)."""
        fd = self._open(path)
        if fd is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                outside = path.startswith("/")
                raise _refused(
                    _OUTSIDE_UNREADABLE if outside else f"{_name(path)} is not a regular file."
                )
            data = _read_all(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise _refused(f"{_name(path)} is larger than git ever writes one.")
        return data.decode("utf-8", "replace")

    def _open(self, path: str) -> int | None:
        """A file of a repository open for reading (None: it does not exist): a
        workspace-relative one beneath the pinned workspace; an absolute one (a git directory
        elsewhere, a linked worktree's) without a link on the way, and only the workspace
        owner's (it names what git reads for them)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        try:
            if not path.startswith("/"):
                return self._root.open_beneath(path, flags)
            fd = openat2(AT_FDCWD, path, flags, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refused(_why(path, exc)) from exc
        trusted = any(path.startswith(f"{place}/") for place in self._trusted)
        if os.fstat(fd).st_uid != self._root.uid and not trusted:
            os.close(fd)
            raise _refused(_OUTSIDE_UNREADABLE)
        return fd


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _named(root: PinnedDirectory, text: str | None, base: str, *, gitfile: bool) -> str | None:
    """The directory a `.git` file (`gitfile`) or `commondir` names, relative to `base`:
    workspace-relative when inside the workspace, else absolute; None when it names nothing."""
    if text is None:
        return None
    if gitfile:
        if not text.startswith(_GITDIR_PREFIX):
            return None  # not a git file: git refuses it too
        text = text[len(_GITDIR_PREFIX) :]
    named = text.rstrip("\r\n\t ")
    if not named or "\0" in named:
        return None
    # "": the work tree itself, not a git directory git accepts
    return _placed(root, base, named) or None


def _resolved(root: PinnedDirectory, base: str, named: str) -> str | None:
    """`named`, relative to `base` (workspace-relative, or absolute outside): workspace-relative
    when inside the workspace ("" for its root), else absolute; None for what cannot be known
    here (a path in someone's home, one with a variable or a NUL)."""
    if not named or named.startswith("~") or "$" in named or "\0" in named:
        return None
    return _placed(root, base, named)


def _placed(root: PinnedDirectory, base: str, named: str) -> str:
    """`named` relative to `base`: workspace-relative when inside the workspace ("" for its
    root), else absolute."""
    where = posixpath.normpath(
        named if posixpath.isabs(named) else posixpath.join(str(root.path), base, named)
    )
    inside = posixpath.relpath(where, str(root.path))
    if inside == ".":
        return ""
    return where if inside == ".." or inside.startswith("../") else inside


def _pathname(root: PinnedDirectory, base: str, named: str) -> str | None:
    """A path-valued setting (core.hooksPath, include.path) as git takes it: `~` and
    `%(prefix)/` lead elsewhere; anything else, `$` included, is a plain path."""
    if not named or named.startswith(("~", "%(prefix)/")) or "\0" in named:
        return None
    return _placed(root, base, named)


def _runs(key: str, value: str) -> bool:
    """Whether git runs the value of `key` as a command (or a program at that path)."""
    section, name = key.partition(".")[0], key.rpartition(".")[2]
    return {
        "pager": True,  # pager.<command> = the pager to run
        "alias": value.startswith("!"),  # a shell command; otherwise git's own
        "submodule": name == "update" and value.startswith("!"),
    }.get(section, name in _COMMAND_NAMES or name.endswith(("cmd", "command")))


def _command_words(value: str) -> list[tuple[str, bool]]:
    """The words of a command that may name files of the work tree, each with whether it is a
    script an interpreter runs (`sh strip.sh`, `python3 -u conv.py`): the program (a path, or a
    bare name found on PATH), an option's value (`--file=x`, `-fx`, `-I x`) and every
    argument."""
    words: list[tuple[str, bool]] = []
    interpreter = ""
    value_next = False
    for raw in _shell_words(value):
        if value_next:
            words.append((raw, False))
            value_next = False
            continue
        if raw.startswith("-") and len(raw) > 1:
            code = _CODE_OPTIONS.get(raw, "")
            if code is None or (code and interpreter.rstrip("0123456789.") in code):
                interpreter = ""  # code or a module follows: no script
            value_next = raw in _VALUE_OPTIONS
            if "=" in raw:
                words.append((raw.partition("=")[2], False))
            elif not raw.startswith("--") and len(raw) > 2:
                words.append((raw[2:], False))  # a value attached to its option: -fci.mk
            continue
        words.append((raw, bool(interpreter)))
        program = posixpath.basename(raw)
        interpreter = program if _INTERPRETER.fullmatch(program) else ""
    return words


def _shell_words(value: str) -> list[str]:
    """The words of a command as the shell (or git, splitting an alias) takes them: quotes
    keep a word whole (`-c "diff.external=sh difft.sh"`, round 70), operators stand apart.

    Raises:
        ToolError: Quotes that do not end: neither git nor the shell would run it.
    """
    lexer = shlex.shlex(value.lstrip("!"), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return [word for word in lexer if word.strip(_OPERATORS)]
    except ValueError as exc:
        raise _refused(f"A configured command cannot be split into words ({exc}).") from exc


def _git_options(value: str) -> list[tuple[str, str]]:
    """The `-c key=value` settings a command gives git (an alias's own, or `!git -c ...`): git
    takes them as configuration of its own."""
    words = _shell_words(value)
    found = []
    for option, setting in itertools.pairwise(words):
        key, equals, setting_value = setting.partition("=")
        if option == "-c" and equals and "." in key:
            section, _, rest = key.partition(".")
            middle, _, name = rest.rpartition(".")
            found.append(
                (".".join(p for p in (section.lower(), middle, name.lower()) if p), setting_value)
            )
    return found


def _path_words(value: str) -> list[str]:
    """The words of a configured value that are paths (with a slash): a command's program and
    arguments, an option's value (`--file=tools/x`)."""
    words = []
    for word in _WORDS.split(value):
        word = word.lstrip("!").rpartition("=")[2] if word.startswith(("!", "-")) else word
        if "/" in word:
            words.append(word)
    return words


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


_SEQUENCES = ("rebase-merge", "rebase-apply", "sequencer")
"""What git keeps of a rebase, am, cherry-pick or revert under way (commands it runs next)."""
_NEVER_VOUCHED = frozenset({"config.worktree", "commondir", "modules", *_SEQUENCES})
_UNVOUCHED = itertools.count()
MAX_CONFIG_VERDICTS = 1024
_configurations: dict[tuple[int, int, int, int, int], tuple[bool, int]] = {}
"""`_Pins._config_verdict`'s verdicts, by the file's device, inode, size and times."""


def _object_name_bytes(config: dict[str, str]) -> int:
    """How long a repository's object names are, as its configuration says (20: SHA-1)."""
    return 32 if config.get("extensions.objectformat", "").lower() == "sha256" else 20


def _beyond_configuration(key: str, value: str) -> bool:
    """Whether a configuration entry has git run or read something beyond the file."""
    return (
        _runs(key, value)
        or key.startswith(("alias.", "protocol."))
        or "include" in key
        or key == "core.hookspath"
        or "worktree" in key
        or "ext::" in value.lower()
    )


def _unvouched() -> tuple[str, int, int, int]:
    """A mark no other look has: what it stands for may have changed unseen."""
    return ("(not followed)", next(_UNVOUCHED), 0, 0)


def _seen(name: str, info: os.stat_result) -> tuple[str, int, int, int]:
    return (name, info.st_ino, info.st_size, info.st_ctime_ns)


def _lstat(root: PinnedDirectory, relative: str) -> os.stat_result | None:
    """What `relative` is, reached without a link (None: it does not exist)."""
    return _in_parent(
        root, relative, lambda name, fd: os.stat(name, dir_fd=fd, follow_symlinks=False)
    )


def _link_text(root: PinnedDirectory, relative: str) -> str | None:
    """What the link at `relative` says (None: it is not a link, or is missing)."""
    return _in_parent(
        root, relative, lambda name, fd: os.readlink(name, dir_fd=fd), absent=(errno.EINVAL,)
    )


def _in_parent(
    root: PinnedDirectory,
    relative: str,
    look: Callable[[str, int], _Found],
    absent: tuple[int, ...] = (),
) -> _Found | None:
    """`look` at the last part of `relative`, in its directory reached without a link (None:
    it does not exist, or fails with an errno of `absent`); anything else is refused."""
    parent, _, name = relative.rpartition("/")
    try:
        fd = root.open_beneath(parent, os.O_PATH | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(_why(relative, exc)) from exc
    try:
        return look(name, fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT or exc.errno in absent:
            return None
        raise _refused(_why(relative, exc)) from exc
    finally:
        os.close(fd)


def _linked_entries(root: PinnedDirectory, directory: str) -> list[str]:
    """The names of the links in a directory of the workspace, reached without a link (one
    made since it was looked at is refused)."""
    try:
        fd = root.open_beneath(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _refused(_why(directory, exc)) from exc
    try:
        return _links_at(fd, directory)
    finally:
        os.close(fd)


def _links_at(fd: int, directory: str) -> list[str]:
    """The names of the links in the directory open as `fd`."""
    with os.scandir(fd) as entries:
        names = []
        for count, entry in enumerate(entries):
            if count >= MAX_HOOK_ENTRIES:
                raise _refused(f"{_name(directory)} holds more than {MAX_HOOK_ENTRIES} entries.")
            if entry.is_symlink():
                names.append(entry.name)
        return names


def _name(path: str) -> str:
    """How a refusal names a file: one outside the workspace is not named (what is there, or
    where, is the host's)."""
    return (
        "A file of the git directory outside" if path.startswith("/") else f"The workspace's {path}"
    )


def _why(path: str, exc: OSError) -> str:
    if path.startswith("/"):
        return _OUTSIDE_UNREADABLE
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return f"{_name(path)} is reached through a symbolic link."
    return f"{_name(path)} cannot be looked at ({exc.strerror})."


_OUTSIDE_UNREADABLE = (
    "A file of the repository's git directory outside the workspace cannot be read (only the "
    "workspace owner's regular files, reached without a symbolic link, are)."
)
_OUTSIDE_HOOKS = (
    "The repository's hooks folder lies outside the workspace, where it cannot be checked: only "
    "a folder of the workspace owner's, reached without a symbolic link, is looked at (git would "
    "run hooks from it, and follow their links into the workspace). Point core.hooksPath inside "
    "the workspace, or at such a folder, or unset it."
)
_NOT_BACK = (
    "{what} names a git directory outside the workspace that does not name "
    "this work tree back, or that cannot be read (only the workspace owner's files, reached "
    "without a symbolic link, are). A linked worktree's git directory names it in its gitdir "
    "file (`git worktree repair` mends it); a separate git directory needs core.worktree "
    "(`git config core.worktree <work tree>`)."
)


def _refused(why: str) -> ToolError:
    return ToolError(
        f"{why} The sandbox keeps the workspace's repository read-only, and cannot do so here, "
        f"so nothing ran. Ask the user to fix {GIT_DIR_NAME}, or to have the policy grant git "
        "writes (sandbox.git: writable)."
    )
