"""Which Bash command lines only read: those may run in parallel with other read-only calls.

An allow-list of shapes, not of programs: a line is read-only only when every simple command in
it is a known reader used with options known to only read (`sort` but not `sort -o FILE`,
`uniq IN` but not `uniq IN OUT`, `date +%F` but not `date -s`), with no assignment prefix
(`PATH=`, `LD_PRELOAD=`), no wrapper, no redirection, no word that is only known at run time
where an option could hide (`sort $OPTS`, `cat *` when a file could be named `--output=x`), and
no program a repository's own configuration can make run others (git: core.fsmonitor,
diff.external, textconv). Anything not on the lists is a writer and runs alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from daemon.shell.hidden import hidden_code
from daemon.shell.model import ParsedCommand, SimpleCommand


@dataclass(frozen=True)
class _Shape:
    """The read-only uses of one program."""

    flags: str = ""
    """Short options without a value (any cluster of them, e.g. `-la`)."""
    valued: str = ""
    """Short options that take a value (`-n 5` or `-n5`)."""
    long: frozenset[str] = field(default_factory=frozenset)
    """Long options (`--name` or `--name=value`); those in `long_valued` may take the next word."""
    long_valued: frozenset[str] = field(default_factory=frozenset)
    operands: Callable[[Sequence[str]], bool] = lambda _: True
    """Whether these operands keep it read-only."""
    any_words: bool = False
    """Every word is text, never an option that writes (echo, printf, test)."""


def _longs(text: str) -> frozenset[str]:
    return frozenset(text.split())


_GREP_LONG = _longs(
    "extended-regexp fixed-strings basic-regexp perl-regexp ignore-case no-ignore-case "
    "word-regexp line-regexp null-data no-messages invert-match version help byte-offset "
    "line-number line-buffered with-filename no-filename only-matching quiet silent text "
    "recursive dereference-recursive files-without-match files-with-matches count initial-tab "
    "null color colour"
)
_GREP_LONG_VALUED = _longs(
    "regexp file max-count label binary-files directories devices include exclude "
    "exclude-from exclude-dir before-context after-context context color colour"
)
_RG_LONG = _longs(
    "ignore-case smart-case case-sensitive fixed-strings word-regexp line-regexp invert-match "
    "count count-matches files-with-matches files-without-match only-matching quiet "
    "line-number no-line-number with-filename no-filename hidden no-ignore no-ignore-vcs "
    "follow json vimgrep files multiline multiline-dotall pcre2 null heading no-heading trim "
    "stats text unrestricted no-messages column byte-offset passthru no-config type-list "
    "color colors sort sortr"
)
_RG_LONG_VALUED = _longs(
    "glob iglob type type-not max-count max-depth max-filesize context before-context "
    "after-context regexp file replace threads encoding max-columns color colors sort sortr"
)

_SHAPES: dict[str, _Shape] = {
    "cat": _Shape("AbeEnstTuv", "", _longs("show-all number-nonblank number squeeze-blank "
                  "show-ends show-tabs show-nonprinting help version")),
    "head": _Shape("qvz", "nc", _longs("quiet silent verbose zero-terminated"),
                   _longs("lines bytes")),
    "tail": _Shape("qvzfF", "ncs", _longs("quiet silent verbose zero-terminated follow retry"),
                   _longs("lines bytes pid sleep-interval max-unchanged-stats")),
    "wc": _Shape("clmwL", "", _longs("bytes chars lines words max-line-length"),
                 _longs("files0-from total")),
    "ls": _Shape("aAbBcCdfFgGhHiklLmnNopqQrRsStTuUvxXZ1", "IwT",
                 _longs("all almost-all author escape ignore-backups directory dired classify "
                        "file-type full-time group-directories-first no-group human-readable "
                        "si dereference-command-line inode kibibytes dereference "
                        "numeric-uid-gid literal hide-control-chars show-control-chars "
                        "quote-name reverse recursive size context zero help version color"),
                 _longs("block-size color format hide hyperlink indicator-style ignore "
                        "quoting-style sort time time-style tabsize width")),
    "pwd": _Shape("LP"),
    "echo": _Shape(any_words=True),
    "printf": _Shape(any_words=True),
    "true": _Shape(any_words=True),
    "false": _Shape(any_words=True),
    "test": _Shape(any_words=True),
    "[": _Shape(any_words=True),
    "sleep": _Shape(any_words=True),
    "stat": _Shape("LftZ", "c", _longs("dereference file-system terse cached"),
                   _longs("format printf cached")),
    "file": _Shape("bcdEhiklLNrsSvz0", "eFmP",
                   _longs("brief mime mime-type mime-encoding dereference no-dereference "
                          "no-pad raw special-files uncompress keep-going extension help "
                          "version"),
                   _longs("separator files-from magic-file exclude parameter")),
    "du": _Shape("0abcDhHklLmsSxP", "dBtX",
                 _longs("null all apparent-size bytes total dereference-args human-readable "
                        "inodes dereference no-dereference count-links separate-dirs si "
                        "summarize one-file-system"),
                 _longs("block-size max-depth threshold time time-style exclude-from exclude "
                        "files0-from")),
    "df": _Shape("ahHiklPTv", "Btx", _longs("all human-readable si inodes local print-type "
                 "total portability"), _longs("block-size output type exclude-type")),
    "which": _Shape("a"),
    "whoami": _Shape(),
    "id": _Shape("agGnruzZ", "", _longs("context group groups name real user zero")),
    "uname": _Shape("asnrvmpio", "", _longs("all kernel-name nodename kernel-release "
                    "kernel-version machine processor hardware-platform operating-system")),
    # `date -s` and `date MMDDhhmm` set the clock: only formats (+...) may be operands.
    "date": _Shape("uRI", "dfr", _longs("utc universal rfc-email debug"),
                   _longs("date file reference iso-8601 rfc-3339"),
                   operands=lambda ops: all(op.startswith("+") for op in ops)),
    # `sort -o FILE`, `-T DIR` and `--compress-program PROG` write or run: not listed.
    "sort": _Shape("bdfgiMhnRrVcCsuz", "ktS",
                   _longs("ignore-leading-blanks dictionary-order ignore-case "
                          "general-numeric-sort ignore-nonprinting month-sort "
                          "human-numeric-sort numeric-sort random-sort reverse version-sort "
                          "stable unique zero-terminated check debug"),
                   _longs("key field-separator buffer-size parallel sort files0-from "
                          "random-source")),
    # `uniq IN OUT` writes OUT.
    "uniq": _Shape("cdDiuz", "fsw", _longs("count repeated unique ignore-case zero-terminated"),
                   _longs("all-repeated skip-fields skip-chars check-chars group"),
                   operands=lambda ops: len(ops) <= 1),
    "cut": _Shape("snz", "bcdf", _longs("complement only-delimited zero-terminated"),
                  _longs("bytes characters delimiter fields output-delimiter")),
    "tr": _Shape("cCdst", "", _longs("complement delete squeeze-repeats truncate-set1")),
    "diff": _Shape("abBcdEiINlpqrsStTuwyZ", "CUDxXFIWS",
                   _longs("brief report-identical-files ignore-case ignore-tab-expansion "
                          "ignore-trailing-space ignore-space-change ignore-all-space "
                          "ignore-blank-lines text strip-trailing-cr recursive new-file "
                          "unidirectional-new-file side-by-side suppress-common-lines "
                          "show-c-function expand-tabs initial-tab minimal speed-large-files "
                          "no-dereference normal suppress-blank-empty left-column"),
                   _longs("context unified ignore-matching-lines exclude exclude-from "
                          "starting-file width label show-function-line color horizon-lines "
                          "from-file to-file tabsize")),
    "cmp": _Shape("blsv", "in", _longs("print-bytes verbose quiet silent"),
                  _longs("ignore-initial bytes")),
    "basename": _Shape("az", "s", _longs("multiple zero"), _longs("suffix")),
    "dirname": _Shape("z", "", _longs("zero")),
    "realpath": _Shape("eLmPqsz", "", _longs("canonicalize-existing canonicalize-missing "
                       "logical physical quiet strip no-symlinks zero"),
                       _longs("relative-to relative-base")),
    "readlink": _Shape("efmnqsvz", "", _longs("canonicalize canonicalize-existing "
                       "canonicalize-missing no-newline quiet silent verbose zero")),
    "grep": _Shape("EFGPiyvwxcLlHhnbsqoaIrRTUzZ0123456789", "efmABCdD", _GREP_LONG,
                   _GREP_LONG_VALUED),
    "egrep": _Shape("EFGPiyvwxcLlHhnbsqoaIrRTUzZ0123456789", "efmABCdD", _GREP_LONG,
                    _GREP_LONG_VALUED),
    "fgrep": _Shape("EFGPiyvwxcLlHhnbsqoaIrRTUzZ0123456789", "efmABCdD", _GREP_LONG,
                    _GREP_LONG_VALUED),
    # rg --pre runs a program on every file: not listed.
    "rg": _Shape("iIsSFwxvcloqnNHhLuUaz0", "eftgTmACBjMrE", _RG_LONG, _RG_LONG_VALUED),
    # tree -o FILE writes: not listed.
    "tree": _Shape("adfilpsughDFrtvUcCANSQqxJ", "LPIH",
                   _longs("noreport dirsfirst prune matchdirs ignore-case gitignore du si help "
                          "version"), _longs("filelimit charset sort timefmt")),
    "nl": _Shape("p", "bdfhilnsvw"),
    "column": _Shape("tnxeLJ", "scoNHWEdRr"),
    **{
        name: _Shape("bctwz", "", _longs("binary check tag text ignore-missing quiet status "
                     "strict warn zero"))
        for name in ("sha256sum", "sha1sum", "sha512sum", "sha224sum", "sha384sum", "md5sum",
                     "b2sum", "cksum")
    },
}  # fmt: skip

#: find's expression words that only test or print (not -delete, -exec..., -fprint...).
_FIND_TESTS = _longs(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -size -mtime "
    "-mmin -atime -amin -ctime -cmin -newer -anewer -cnewer -newermt -newerct -newerat -perm "
    "-user -group -uid -gid -nouser -nogroup -links -inum -samefile -empty -readable -writable "
    "-executable -true -false -print -print0 -printf -ls -prune -quit -depth -xdev -mount "
    "-follow -noleaf -maxdepth -mindepth -regextype -not -a -and -o -or -daystart -fstype "
    "-lname -ilname -used ! ( ) ,"
)
_FIND_VALUED = _longs(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -size -mtime "
    "-mmin -atime -amin -ctime -cmin -newer -anewer -cnewer -newermt -newerct -newerat -perm "
    "-user -group -uid -gid -links -inum -samefile -printf -maxdepth -mindepth -regextype "
    "-fstype -lname -ilname -used"
)


def _words_read_only(shape: _Shape, words: Sequence[str], dynamic: Sequence[bool]) -> bool:
    if any(dynamic):
        return False  # an expansion or a glob could split into an option that writes
    operands: list[str] = []
    i = 0
    over = False
    while i < len(words):
        word = words[i]
        if over or not word.startswith("-") or word == "-":
            operands.append(word)
        elif word == "--":
            over = True
        elif word.startswith("--"):
            name, has_value, _ = word[2:].partition("=")
            if name in shape.long_valued:
                i += 0 if has_value else 1
            elif name not in shape.long or has_value:
                return False
        else:
            takes_next = _short_cluster(shape, word[1:])
            if takes_next is None:
                return False
            i += 1 if takes_next else 0
        i += 1
    return shape.operands(operands)


def _short_cluster(shape: _Shape, letters: str) -> bool | None:
    """None when the cluster holds an unknown letter; else whether its value is the next word."""
    for at, letter in enumerate(letters):
        if letter in shape.valued:
            return at == len(letters) - 1
        if letter not in shape.flags:
            return None
    return False


def _find_read_only(words: Sequence[str], dynamic: Sequence[bool]) -> bool:
    if any(dynamic):
        return False
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") or word in ("!", "(", ")", ","):
            if word in ("-H", "-L", "-P"):
                i += 1
                continue
            if word not in _FIND_TESTS:
                return False
            i += 1 if word in _FIND_VALUED else 0
        i += 1
    return True


def command_reads_only(command: SimpleCommand) -> bool:
    """True when this one simple command only reads (see the module's docstring)."""
    if command.wrappers or command.assignments or command.dynamic:
        return False
    words = command.argv[1:]
    dynamic = command.dynamic_words[1:] if command.dynamic_words else (False,) * len(words)
    if command.path not in (command.name, f"/usr/bin/{command.name}", f"/bin/{command.name}"):
        return False  # `./find` is a program of the model's (attacker round 84)
    if command.name == "find":
        return _find_read_only(words, dynamic)
    shape = _SHAPES.get(command.name)
    if shape is None:
        return False
    if shape.any_words:
        return True
    return _words_read_only(shape, words, dynamic)


def is_read_only(line: ParsedCommand) -> bool:
    """True when every part of the parsed line only reads (see the module's docstring)."""
    if not line.parsed or line.redirects or not line.simple_commands:
        return False
    # A function of the line, or a PATH it sets, may make a name run a program of the model's.
    if line.defines_functions or "PATH" in line.raw:
        return False
    # Arithmetic evaluates variables as expressions, subscripts and all: code can hide there.
    if "((" in line.raw or hidden_code(line):
        return False
    return all(command_reads_only(c) for c in line.simple_commands)
