"""Peeling wrapper programs (sudo, env, timeout, bash -c, ...) off one simple command's argv.

Works on words that the parser already took out of the syntax tree (quotes removed). Pure string
logic: nothing here runs or looks up a program. Option parsing follows each tool's getopt rules,
because a wrong guess about which option takes an argument would hide the real command among
the arguments; an option we do not know is taken as a flag.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "yash", "posh"})
"""Shells whose `-c STRING` (and script on standard input) are parsed recursively."""

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal."""

    text: str
    """The word as written, quotes and escapes removed, expansions such as `$HOME` kept as text."""
    dynamic: bool = False
    """True when an expansion, glob or brace pattern makes its value known only at run time."""


@dataclass(frozen=True)
class Script:
    """A command string that a wrapper hands to a shell, to be parsed like the line itself."""

    label: str
    """The wrapper label its commands get, e.g. "bash -c" or "eval"."""
    text: str


@dataclass(frozen=True)
class Unwrapped:
    """The real command under a chain of wrappers."""

    argv: tuple[Word, ...]
    """The command that finally runs; a wrapper with nothing after it is its own command."""
    wrappers: tuple[str, ...]
    """Labels of the wrappers peeled off, outermost first."""
    assignments: tuple[str, ...]
    """NAME=value words the wrappers (sudo, env) put in the environment."""
    script: Script | None = None
    """A command string the innermost wrapper runs (bash -c, eval); argv is then that wrapper."""
    stdin_shell: bool = False
    """argv is a shell reading its commands from standard input (a heredoc may feed it)."""


@dataclass(frozen=True)
class _Opts:
    """getopt description of a wrapper: which options consume an argument."""

    short_arg: str = ""
    short_optional: str = ""
    """Short options whose argument can only be attached (`-i{}`), never the next word."""
    long_arg: frozenset[str] = frozenset()
    long_flag: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Peel:
    rest: tuple[Word, ...]
    assignments: tuple[str, ...] = ()
    script: Script | None = None
    stdin_shell: bool = False
    label: str = ""
    """The wrapper's label when it is not its name (`env -C`: it runs the command elsewhere)."""


_Peeler = Callable[[tuple[Word, ...]], _Peel | None]


def basename(path: str) -> str:
    """The program name of a path as written (`/usr/bin/sudo` -> `sudo`)."""
    stripped = path.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if stripped else path


def _long_takes_arg(name: str, opts: _Opts) -> bool:
    if name in opts.long_arg:
        return True
    if name in opts.long_flag or not name:
        return False
    # getopt_long accepts any unambiguous prefix (`--us root` is `--user root`).
    takes = any(o.startswith(name) for o in opts.long_arg)
    return takes and not any(o.startswith(name) for o in opts.long_flag)


def _skip_options(words: tuple[Word, ...], start: int, opts: _Opts) -> int:
    """Index of the first operand after the options starting at `start`."""
    i = start
    while i < len(words):
        word = words[i]
        text = word.text
        if word.dynamic or not text.startswith("-") or text == "-":
            return i
        if text == "--":
            return i + 1
        if text.startswith("--"):
            name, eq, _ = text[2:].partition("=")
            if not eq and _long_takes_arg(name, opts):
                i += 1
        else:
            for k, ch in enumerate(text[1:], start=1):
                if ch in opts.short_arg:
                    if k == len(text) - 1:
                        i += 1
                    break
                if ch in opts.short_optional:
                    break
        i += 1
    return i


def _options_given(words: tuple[Word, ...], start: int, opts: _Opts) -> set[str]:
    """The options given from `start` on, as `_skip_options` reads them: short letters (up to
    one that takes the rest of its cluster as its value) and long names, never their values
    (round 150: `prlimit -o description` was read as -p for the `p` in its value)."""
    given: set[str] = set()
    for word in words[start : _skip_options(words, start, opts)]:
        text = word.text
        if text.startswith("--"):
            given.add(text[2:].partition("=")[0])
        elif text.startswith("-"):
            for ch in text[1:]:
                given.add(ch)
                if ch in opts.short_arg or ch in opts.short_optional:
                    break
    return given


def _take_assignments(words: tuple[Word, ...], start: int) -> tuple[int, tuple[str, ...]]:
    i = start
    while i < len(words) and _ASSIGNMENT.match(words[i].text):
        i += 1
    return i, tuple(w.text for w in words[start:i])


def _simple(opts: _Opts, operands_before_command: int = 0) -> _Peeler:
    def peel(words: tuple[Word, ...]) -> _Peel | None:
        i = _skip_options(words, 1, opts) + operands_before_command
        return _Peel(words[i:]) if i < len(words) else None

    return peel


def _program_or_shell(opts: _Opts, operands_before_command: int = 0) -> _Peeler:
    """A wrapper that starts a shell when no program follows (`chroot /`, `unshare -r`): the
    shell reads its commands from standard input, which a heredoc may feed."""

    def peel(words: tuple[Word, ...]) -> _Peel | None:
        i = _skip_options(words, 1, opts) + operands_before_command
        return _Peel(words[i:]) if i < len(words) else _Peel((), stdin_shell=True)

    return peel


def _unless_given_a_process(opts: _Opts, operands_before_command: int = 0) -> _Peeler:
    """A wrapper whose `-p PID` form changes a running process and runs nothing."""
    simple = _simple(opts, operands_before_command)

    def peel(words: tuple[Word, ...]) -> _Peel | None:
        given = _options_given(words, 1, opts)
        if "p" in given or any("pid".startswith(o) for o in given if len(o) > 1):
            return None
        return simple(words)

    return peel


def _setarch(words: tuple[Word, ...]) -> _Peel | None:
    """setarch [ARCH] [options] [program [args]] (the architecture may be left out since
    util-linux 2.33: round 150's `setarch --uname-2.6 rm`), or one of its links named after an
    architecture (`linux32 [options] [program]`); no program: a shell."""
    start = 1
    if basename(words[0].text) == "setarch" and len(words) > 1:
        start = 1 if words[1].text.startswith("-") else 2
    if _options_given(words, start, _NO_OPTS) & {"list", "help", "version", "h", "V"}:
        return None
    i = _skip_options(words, start, _NO_OPTS)
    return _Peel(words[i:]) if i < len(words) else _Peel((), stdin_shell=True)


def _loader(words: tuple[Word, ...]) -> _Peel | None:
    """The dynamic loader run as a program (`ld.so [options] PROGRAM [args]`) runs PROGRAM
    (round 150); --list, --verify and the like only look at it. With --argv0 the program runs
    under another name: labelled `ld.so --argv0` (see `_exec`)."""
    given = _options_given(words, 1, _LOADER_OPTS)
    if given & {"list", "verify", "help", "version", "list-tunables", "list-diagnostics"}:
        return None
    peel = _LOADER_RUNS(words)
    if peel is not None and any("argv0".startswith(o) for o in given if len(o) > 1):
        return replace(peel, label="ld.so --argv0")
    return peel


_EXEC_OPTS = _Opts(short_arg="a")


def _exec(words: tuple[Word, ...]) -> _Peel | None:
    """exec [-cl] [-a NAME] PROGRAM [args]; with -a the program runs under another name, which
    some take as what to do (`exec -a git-init git status --shared=0777` ran git init, and
    `exec -a linux64 setarch chmod 777 .` ran chmod: attacker round 187): labelled `exec -a`."""
    peel = _simple(_EXEC_OPTS)(words)
    if peel is not None and "a" in _options_given(words, 1, _EXEC_OPTS):
        return replace(peel, label="exec -a")
    return peel


_LOADER_OPTS = _Opts(
    long_arg=frozenset(
        {"library-path", "inhibit-rpath", "audit", "preload", "argv0", "glibc-hwcaps-prepend"}
        | {"glibc-hwcaps-mask"}
    ),
    long_flag=frozenset({"inhibit-cache", "list", "verify", "help", "version"}),
)
_LOADER_RUNS = _simple(_LOADER_OPTS)
_LOADER_NAME = re.compile(r"ld\.so|ld-[A-Za-z0-9_.-]*\.so(?:\.[0-9]+)*")
"""The dynamic loader's names (ld.so, ld-linux-x86-64.so.2, ld-musl-x86_64.so.1)."""


def _start_stop_daemon(words: tuple[Word, ...]) -> _Peel | None:
    """start-stop-daemon --start runs the program of -x/--exec (or -a/--startas), with the
    words after `--` (round 150)."""
    program: Word | None = None
    i = 1
    while i < len(words) and words[i].text != "--":
        text = words[i].text
        name, eq, value = text.partition("=")
        if text in ("-x", "-a", "--exec", "--startas") and i + 1 < len(words):
            program = words[i + 1]
            i += 1
        elif eq and name in ("--exec", "--startas"):
            program = Word(value, words[i].dynamic)
        elif text.startswith(("-x", "-a")) and len(text) > 2:
            program = Word(text[2:], words[i].dynamic)
        i += 1
    if program is None:
        return None
    return _Peel((program, *words[i + 1 :]))


def _flock(words: tuple[Word, ...]) -> _Peel | None:
    """flock [options] FILE program [args]; `flock FILE -c STRING` runs STRING through a shell
    (`deferred_scripts`), `flock FD` runs nothing."""
    i = _skip_options(words, 1, _FLOCK_OPTS) + 1
    if i >= len(words) or words[i].text.startswith(("-c", "--co")):
        return None
    return _Peel(words[i:])


_FLOCK_OPTS = _Opts(
    short_arg="Ewc", long_arg=frozenset({"conflict-exit-code", "timeout", "wait", "command"})
)


def _runcon(words: tuple[Word, ...]) -> _Peel | None:
    """runcon CONTEXT program [args], or runcon [-c] [-u U] [-r R] [-t T] [-l L] program."""
    i = _skip_options(words, 1, _RUNCON_OPTS)
    i += 1 if i == 1 else 0  # no option: the first operand is the context
    return _Peel(words[i:]) if i < len(words) else None


_RUNCON_OPTS = _Opts(short_arg="urtl", long_arg=frozenset({"user", "role", "type", "range"}))


def _sudo_like(opts: _Opts) -> _Peeler:
    def peel(words: tuple[Word, ...]) -> _Peel | None:
        i, assignments = _take_assignments(words, _skip_options(words, 1, opts))
        return _Peel(words[i:], assignments) if i < len(words) else None

    return peel


def _command(words: tuple[Word, ...]) -> _Peel | None:
    # `command -v X` / `-V X` only describe X; they do not run it.
    for word in words[1:]:
        if not word.text.startswith("-") or word.text == "--":
            break
        if "v" in word.text or "V" in word.text:
            return None
    i = _skip_options(words, 1, _Opts())
    return _Peel(words[i:]) if i < len(words) else None


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


_ENV_LONG_ARG = frozenset({"unset", "chdir", "split-string"})
_ENV_LONG_FLAG = frozenset(
    {"ignore-environment", "null", "debug", "help", "version", "list-signal-handling"}
    | {"block-signal", "default-signal", "ignore-signal"}
)


def _env(words: tuple[Word, ...]) -> _Peel | None:
    """env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]... [COMMAND]; -S splits STRING.
    With -C (--chdir) the command runs in another directory: labelled `env -C`."""
    rest = list(words[1:])
    i = 0
    moves = False
    while i < len(rest):
        word = rest[i]
        text = word.text
        if word.dynamic or not text.startswith("-") or text == "-":
            if text == "-" and not word.dynamic:  # a lone `-` means -i
                i += 1
                continue
            break
        if text == "--":
            i += 1
            break
        split_arg: str | None = None
        consumed = 1
        if text.startswith("--"):
            name, eq, value = text[2:].partition("=")
            takes = _long_takes_arg(name, _Opts(long_arg=_ENV_LONG_ARG, long_flag=_ENV_LONG_FLAG))
            if takes and "split-string".startswith(name):
                split_arg = value if eq else (rest[i + 1].text if i + 1 < len(rest) else "")
                consumed = 1 if eq else 2
            elif takes and not eq:
                consumed = 2
            moves = moves or bool(takes and "chdir".startswith(name))
        else:
            for k, ch in enumerate(text[1:], start=1):
                moves = moves or ch == "C"
                if ch in "uCS":
                    attached = text[k + 1 :]
                    value = attached or (rest[i + 1].text if i + 1 < len(rest) else "")
                    consumed = 1 if attached else 2
                    if ch == "S":
                        split_arg = value
                    break
        if split_arg is not None:
            # env -S puts the split words in place of its argument and goes on parsing them.
            # It reads escapes (`\\c` ends the string), comments and `${NAME}` its own way, not
            # as shlex does: such a string's words are known only when it runs (round 150).
            dynamic = word.dynamic or any(c in split_arg for c in "\\#$")
            rest[i : i + consumed] = [Word(t, dynamic) for t in _split(split_arg)]
            continue
        i += consumed
    start, assignments = _take_assignments(tuple(rest), min(i, len(rest)))
    if start >= len(rest):
        return None
    return _Peel(tuple(rest[start:]), assignments, label="env -C" if moves else "")


def _eval(words: tuple[Word, ...]) -> _Peel | None:
    if len(words) < 2:
        return None
    return _Peel((), script=Script("eval", " ".join(w.text for w in words[1:])))


#: Names of a shell's own standard input, as a script operand (`bash /dev/stdin <<EOF`).
_STDIN_NAMES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0"})


def _names_stdin(word: Word) -> bool:
    return not word.dynamic and posixpath.normpath("/" + word.text.lstrip("/")) in _STDIN_NAMES


#: bash's long options, which it also takes after one dash.
_BASH_LONG = frozenset(
    {"debug", "debugger", "dump-po-strings", "dump-strings", "help", "init-file", "login"}
    | {"noediting", "noprofile", "norc", "posix", "pretty-print", "rcfile", "restricted"}
    | {"verbose", "version", "wordexp"}
)


def _shell(words: tuple[Word, ...]) -> _Peel | None:
    """bash [options] -c STRING [name [args]]: the first operand after the options is STRING.
    Without -c the commands come from standard input when no operand follows, with -s (the
    operands are then the positional parameters), or when the script named is standard input
    (attacker round 88: `bash -s x <<< 'rm -rf *'`, `bash /dev/stdin <<EOF`)."""
    has_c = has_s = False
    i = 1
    while i < len(words):
        word = words[i]
        text = word.text
        if word.dynamic or not text.startswith(("-", "+")) or text == "+":
            break
        if text in ("-", "--"):
            i += 1
            break
        if text.startswith("--"):
            i += 2 if text in ("--rcfile", "--init-file") else 1
            continue
        if basename(words[0].text) in ("bash", "rbash") and text[1:] in _BASH_LONG:
            # bash takes its long options with one dash too (`-rcfile FILE`: attacker round
            # 194 read it as `-r -c -f ...`, with FILE for the command string).
            i += 2 if text[1:] in ("rcfile", "init-file") else 1
            continue
        i += 1
        for ch in text[1:]:
            if ch == "c" and text[0] == "-":
                has_c = True
            elif ch == "s" and text[0] == "-":
                has_s = True
            elif ch in "oO":  # each -o / -O in a cluster consumes the next word
                i += 1
    if not has_c:
        # A script file runs commands we cannot see.
        if has_s or i >= len(words) or _names_stdin(words[i]):
            return _Peel((), stdin_shell=True)
        return None
    if i >= len(words):
        return None
    label = f"{basename(words[0].text)} -c"
    return _Peel((), script=Script(label, words[i].text))


_NO_OPTS = _Opts()
_ARCHITECTURES = ("linux32", "linux64", "i386", "i686", "x86_64", "uname26", "arm64", "aarch64")
"""setarch's links, named after the architecture they set."""

PEELERS: dict[str, _Peeler] = {
    "sudo": _sudo_like(
        _Opts(
            short_arg="ugpCDrtUTRac",
            short_optional="h",
            long_arg=frozenset(
                {"user", "group", "host", "prompt", "close-from", "chdir", "role", "type"}
                | {"other-user", "command-timeout", "chroot", "auth-type", "login-class"}
            ),
            long_flag=frozenset(
                {"preserve-env", "set-home", "login", "shell", "non-interactive", "background"}
                | {"stdin", "askpass", "edit", "list", "validate", "reset-timestamp", "help"}
                | {"remove-timestamp", "preserve-groups", "bell", "version"}
            ),
        )
    ),
    "doas": _sudo_like(_Opts(short_arg="Cu")),
    "env": _env,
    "timeout": _simple(
        _Opts(
            short_arg="ks",
            long_arg=frozenset({"kill-after", "signal"}),
            long_flag=frozenset({"foreground", "preserve-status", "verbose", "help", "version"}),
        ),
        operands_before_command=1,
    ),
    "nice": _simple(_Opts(short_arg="n", long_arg=frozenset({"adjustment"}))),
    "nohup": _simple(_NO_OPTS),
    "stdbuf": _simple(_Opts(short_arg="ioe", long_arg=frozenset({"input", "output", "error"}))),
    "xargs": _simple(
        _Opts(
            short_arg="aEILnPsd",
            short_optional="eil",
            long_arg=frozenset(
                {"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"}
            ),
            long_flag=frozenset(
                {"null", "open-tty", "interactive", "no-run-if-empty", "verbose", "exit"}
                | {"show-limits", "eof", "replace", "max-lines", "help", "version"}
            ),
        )
    ),
    "command": _command,
    "builtin": _simple(_NO_OPTS),
    "exec": _exec,
    # Keywords, after which assignments are the command's (`time V=1 rm x`).
    "time": _sudo_like(
        _Opts(
            short_arg="fo",
            long_arg=frozenset({"format", "output"}),
            long_flag=frozenset({"append", "portability", "verbose", "quiet", "help", "version"}),
        )
    ),
    "coproc": _sudo_like(_NO_OPTS),
    "setsid": _simple(_NO_OPTS),
    "ionice": _simple(
        _Opts(short_arg="cnpPu", long_arg=frozenset({"class", "classdata", "pid", "pgid", "uid"}))
    ),
    "busybox": _simple(_NO_OPTS),
    # util-linux and the like (attacker round 149: `setarch x86_64 mount ...`, `prlimit
    # --nofile=64 rm -rf <ws>/*`, `flock /tmp/lk rm ...` were judged as the wrapper alone).
    **dict.fromkeys(("setarch", *_ARCHITECTURES), _setarch),
    "taskset": _unless_given_a_process(
        _Opts(long_flag=frozenset({"all-tasks", "cpu-list"})), operands_before_command=1
    ),
    "prlimit": _unless_given_a_process(
        _Opts(
            short_arg="po",
            short_optional="cdefilmnqrstuvxy",
            long_arg=frozenset({"pid", "output"}),
            long_flag=frozenset({"noheadings", "raw", "verbose", "help", "version"}),
        )
    ),
    "flock": _flock,
    "chrt": _unless_given_a_process(
        _Opts(
            short_arg="TPD",
            long_arg=frozenset({"sched-runtime", "sched-period", "sched-deadline"}),
        ),
        operands_before_command=1,
    ),
    "setpriv": _simple(
        _Opts(
            long_arg=frozenset(
                {"reuid", "regid", "ruid", "euid", "rgid", "egid", "groups", "inh-caps"}
                | {"ambient-caps", "bounding-set", "securebits", "pdeathsig", "selinux-label"}
                | {"apparmor-profile", "landlock-access", "landlock-rule", "seccomp-filter"}
            )
        )
    ),
    "choom": _unless_given_a_process(_Opts(short_arg="n", long_arg=frozenset({"adjust"}))),
    "uclampset": _unless_given_a_process(_Opts(short_arg="mM")),
    "runcon": _runcon,
    "ld.so": _loader,
    # e2fsprogs' logsave LOGFILE PROGRAM [args] (attacker round 151).
    "logsave": _simple(_NO_OPTS, operands_before_command=1),
    "start-stop-daemon": _start_stop_daemon,
    "chroot": _program_or_shell(
        _Opts(long_arg=frozenset({"groups", "userspec"})), operands_before_command=1
    ),
    "unshare": _program_or_shell(
        _Opts(
            short_arg="SGRw",
            long_arg=frozenset(
                {"propagation", "setgroups", "map-user", "map-group", "map-users"}
                | {"map-groups", "root", "wd", "setuid", "setgid", "monotonic", "boottime"}
            ),
        )
    ),
    "nsenter": _program_or_shell(
        _Opts(
            short_arg="tSG",
            short_optional="mupniUCTrw",
            long_arg=frozenset({"target", "setuid", "setgid"}),
        )
    ),
    "strace": _unless_given_a_process(
        _Opts(
            short_arg="eoPsuEabIOSX",
            long_arg=frozenset({"output", "user", "env", "trace", "signal", "string-limit"}),
        )
    ),
    "ltrace": _unless_given_a_process(
        _Opts(short_arg="eoauAnsDlELxF", long_arg=frozenset({"output", "library", "align"}))
    ),
    "fakeroot": _program_or_shell(_Opts(short_arg="lisb", long_arg=frozenset({"lib", "faked"}))),
    "faketime": _simple(_Opts(short_arg="f"), operands_before_command=1),
    "eatmydata": _simple(_NO_OPTS),
    "numactl": _simple(
        _Opts(
            short_arg="imnNpCP",
            long_arg=frozenset(
                {"interleave", "membind", "cpunodebind", "physcpubind", "preferred"}
                | {"preferred-many", "all"}
            ),
        )
    ),
    "cgexec": _simple(_Opts(short_arg="g", long_flag=frozenset({"sticky"}))),
    "cpulimit": _unless_given_a_process(
        _Opts(short_arg="lpe", long_arg=frozenset({"limit", "pid", "exe", "cpu"}))
    ),
    "sshpass": _simple(_Opts(short_arg="pfdP")),
    "valgrind": _simple(_NO_OPTS),
    "catchsegv": _simple(_NO_OPTS),
    "runuser": _simple(
        _Opts(
            short_arg="ugGCw",
            long_arg=frozenset({"user", "group", "supp-group", "command", "whitelist-environment"}),
        )
    ),
    "eval": _eval,
    **dict.fromkeys(SHELLS, _shell),
}
"""Wrapper programs by basename, each returning what remains after it (None: not wrapping)."""


def unwrap(words: Sequence[Word]) -> Unwrapped:
    """Peel every known wrapper off `words`, outermost first.

    Each peel consumes at least the wrapper's own word, so this ends after len(words) steps.
    """
    current = tuple(words)
    wrappers: list[str] = []
    assignments: list[str] = []
    while current and not current[0].dynamic:
        name = basename(current[0].text)
        peeler = PEELERS.get(name) or (_loader if _LOADER_NAME.fullmatch(name) else None)
        peel = peeler(current) if peeler is not None else None
        if peel is None:
            break
        assignments.extend(peel.assignments)
        if peel.script is not None or peel.stdin_shell:
            return Unwrapped(
                current, tuple(wrappers), tuple(assignments), peel.script, peel.stdin_shell
            )
        wrappers.append(peel.label or name)
        current = peel.rest
    return Unwrapped(current, tuple(wrappers), tuple(assignments))


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def find_exec_commands(argv: Sequence[Word]) -> list[tuple[str, tuple[Word, ...]]]:
    """The commands of find's -exec/-execdir/-ok/-okdir actions, each ending at `;` or `{} +`,
    with its wrapper's label (`find -execdir`: it runs in each found file's folder)."""
    found: list[tuple[str, tuple[Word, ...]]] = []
    i = 1
    while i < len(argv):
        if argv[i].text not in _FIND_EXEC:
            i += 1
            continue
        j = i + 1
        while j < len(argv):
            text = argv[j].text
            if text == ";" or (text == "+" and argv[j - 1].text == "{}"):
                break
            j += 1
        if j > i + 1:
            found.append((f"find {argv[i].text}", tuple(argv[i + 1 : j])))
        i = j + 1
    return found


def deferred_scripts(argv: Sequence[Word]) -> list[Script]:
    """Command strings a builtin keeps to run later (`trap 'CMD' SIG...`, `alias n='CMD'`), or a
    program runs through a shell beside its own work (tar's `--to-command=CMD`, `flock F -c
    CMD`, `script -c CMD`, `watch CMD`: attacker round 90).

    Aliases only run in scripts with expand_aliases set, but parsing them costs nothing.
    """
    if not argv or argv[0].dynamic:
        return []
    name = argv[0].text
    program = basename(name)
    if program in _RUNS_STRINGS:
        return [Script(program, text) for text in _RUNS_STRINGS[program](argv[1:])]
    if name == "trap":
        start = _skip_options(tuple(argv), 1, _NO_OPTS)
        operands = [w.text for w in argv[start:]]
        # `trap - SIG` and `trap 1 2` (a leading signal number) reset handlers instead.
        if len(operands) < 2 or operands[0] == "-" or operands[0].isdigit():
            return []
        return [Script("trap", operands[0])]
    if name == "alias":
        values = (w.text.partition("=")[2] for w in argv[1:] if "=" in w.text)
        return [Script("alias", v) for v in values if v]
    return []


#: tar's options whose value is a command it runs through a shell (GNU tar takes any unambiguous
#: prefix of a long option: `--use-c`); the short ones (`-I`, `-F`) take the rest of their
#: cluster or the next word, and in the old style (`tar xIf CMD a.tar`) the next words in turn.
_TAR_COMMAND_LONG = (
    "checkpoint-action",
    "to-command",
    "use-compress-program",
    "info-script",
    "new-volume-script",
    "rsh-command",
)
_TAR_COMMAND_SHORT = "IF"
#: tar's short options that take a value.
_TAR_VALUED_SHORT = "bCfFgHIKLNTVX"


def _tar_command_value(name: str, value: str) -> str | None:
    """The command a long option's value holds, if any (`exec=CMD` for checkpoint actions).
    tar runs the remote shell with words of its own after it (the host of an archive named
    `host:file`, --rmt-command's program): words only known when it runs (attacker round 186:
    `tar -cf 777:x --rsh-command=/bin/chmod --rmt-command=. f` ran `chmod 777 .`)."""
    if "checkpoint-action".startswith(name):
        return value.removeprefix("exec=") if value.startswith("exec=") else None
    if "rsh-command".startswith(name):
        return f'{value} "$@"'
    return value


def _tar_strings(words: Sequence[Word]) -> list[str]:
    found: list[str] = []
    pending = 0  # the old style's valued letters still waiting for their words
    for i, word in enumerate(words):
        text = word.text
        following = words[i + 1].text if i + 1 < len(words) else ""
        if text == "--":
            break
        if text.startswith("--"):
            name, eq, value = text[2:].partition("=")
            if len(name) >= 2 and any(full.startswith(name) for full in _TAR_COMMAND_LONG):
                command = _tar_command_value(name, value if eq else following)
                if command:
                    found.append(command)
            continue
        old_style = i == 0 and not text.startswith("-")
        if text.startswith("-") or old_style:
            letters = text.removeprefix("-")
            for k, letter in enumerate(letters):
                if letter not in _TAR_VALUED_SHORT:
                    continue
                if old_style:
                    pending += 1
                    if letter in _TAR_COMMAND_SHORT and pending < len(words):
                        found.append(words[pending].text)
                    continue
                value = letters[k + 1 :] or following
                if letter in _TAR_COMMAND_SHORT and value:
                    found.append(value)
                break
    return found


def _option_strings(
    short: str, long: str = "", valued: str = ""
) -> Callable[[Sequence[Word]], list[str]]:
    """The value of `-c CMD`, `-xcCMD` (a cluster, its value attached or the next word),
    `--command CMD` or `--command=CMD`, any prefix of the long name included as getopt_long
    takes it (round 150: `script -qc'...'`, `script --comm '...'`). `valued`: the program's
    other short options that take a value (the rest of their cluster is that value)."""

    def strings(words: Sequence[Word]) -> list[str]:
        found: list[str] = []
        for i, word in enumerate(words):
            text = word.text
            following = words[i + 1].text if i + 1 < len(words) else ""
            if text == "--":
                break
            if text.startswith("--"):
                name, eq, value = text[2:].partition("=")
                if long and name and long.startswith(name):
                    found.append(value if eq else following)
                continue
            if not text.startswith("-"):
                continue
            for k, ch in enumerate(text[1:], start=1):
                if ch == short:
                    found.append(text[k + 1 :] or following)
                    break
                if ch in valued:
                    break
        return [text for text in found if text]

    return strings


def _watch_strings(words: Sequence[Word]) -> list[str]:
    """watch runs its operands joined by spaces through `sh -c` (-x: without a shell, as argv)."""
    start = _skip_options(tuple(words), 0, _WATCH_OPTS)
    return [" ".join(w.text for w in words[start:])] if start < len(words) else []


_WATCH_OPTS = _Opts(
    short_arg="nq",
    short_optional="d",
    long_arg=frozenset({"interval", "equexit"}),
    long_flag=frozenset({"differences"}),
)
"""procps 4: -d and --differences take a value only attached (`-d=permanent`): round 150's
`watch -d rm ...` hid rm as -d's value."""


def _sg_strings(words: Sequence[Word]) -> list[str]:
    """sg [-] [group [-c] command]: the command is run by /bin/sh."""
    operands = [w.text for w in words if w.text not in ("-", "-c")]
    return operands[1:2]


_RUNS_STRINGS: dict[str, Callable[[Sequence[Word]], list[str]]] = {
    "tar": _tar_strings,
    "flock": _option_strings("c", "command", valued="Ew"),
    "script": _option_strings("c", "command", valued="EIOBTm"),
    "su": _option_strings("c", "command", valued="gGsw"),
    "runuser": _option_strings("c", "command", valued="ugGsw"),
    # Round 151's runners in the image: prove's test runner, git-shell's command, scriptlive's.
    "prove": _option_strings("", "exec"),
    "git-shell": _option_strings("c"),
    "scriptlive": _option_strings("c", "command", valued="tIBTEdm"),
    # A callback bash runs every `-c` lines (round 150).
    "mapfile": _option_strings("C", valued="dnOsuc"),
    "readarray": _option_strings("C", valued="dnOsuc"),
    "sg": _sg_strings,
    "watch": _watch_strings,
    # split gives each piece to its --filter through `sh -c` (attacker round 155).
    "split": _option_strings("", "filter", valued="abClnt"),
}
