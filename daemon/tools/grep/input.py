"""Grep's input and the exact ripgrep command line it becomes.

The fields keep Claude Code's names ("-A", "-i", output_mode, head_limit...). The command line is
an argv list (no shell ever sees it): `--no-config`, the pattern after `--`, hidden files searched
but never `.git/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from daemon.errors import ToolInputError
from daemon.host.landlock import Confined
from daemon.tools.contract import ToolInput, ToolPath
from daemon.tools.schema import LaxInt

DEFAULT_HEAD_LIMIT = 250
"""Lines or entries shown when head_limit is not given."""
MAX_COLUMNS = 500
"""Longer matching lines are shown as a preview (minified files would flood the result)."""
RESULT_BUDGET_CHARS = 20_000
"""Grep's result budget."""

OutputMode = Literal["content", "files_with_matches", "count"]


class GrepInput(ToolInput):
    """Input of Grep. Fields named like rg's flags use aliases ("-A", "-i", ...)."""

    model_config = ConfigDict(populate_by_name=True)

    pattern: str = Field(
        min_length=1,
        description="Regular expression to search for (Rust regex syntax, as ripgrep). Escape "
        r"literal characters such as ( ) [ ] { } . * + ? | with a backslash, e.g. 'interface\{\}'.",
    )
    path: ToolPath | None = Field(
        default=None,
        description="The file or directory to search: an absolute path inside the workspace. "
        'Omit the field to search the whole workspace (do not send "null" or "undefined").',
    )
    glob: ToolPath | None = Field(
        default=None,
        description='Only search files whose path matches this glob, e.g. "*.py" or '
        '"src/**/*.{ts,tsx}".',
    )
    file_type: str | None = Field(
        default=None,
        alias="type",
        description='Only search files of this ripgrep type, e.g. "py", "js", "rust", "go". '
        "More efficient than glob for standard types.",
    )
    output_mode: OutputMode = Field(
        default="files_with_matches",
        description='"files_with_matches" (default): paths of matching files, newest first; '
        '"content": matching lines (path:line:text); "count": matching lines per file.',
    )
    after: LaxInt | None = Field(
        default=None,
        alias="-A",
        ge=0,
        description="Lines to show after each match (content mode only).",
    )
    before: LaxInt | None = Field(
        default=None,
        alias="-B",
        ge=0,
        description="Lines to show before each match (content mode only).",
    )
    around: LaxInt | None = Field(
        default=None,
        alias="-C",
        ge=0,
        description="Lines to show before and after each match (content mode only).",
    )
    context: LaxInt | None = Field(
        default=None, ge=0, description='Same as "-C" (content mode only).'
    )
    line_numbers: bool | None = Field(
        default=None,
        alias="-n",
        description="Show line numbers (content mode only; default true).",
    )
    ignore_case: bool | None = Field(
        default=None, alias="-i", description="Match case-insensitively."
    )
    only_matching: bool | None = Field(
        default=None,
        alias="-o",
        description="Show only the matched part of each line (content mode only).",
    )
    head_limit: LaxInt | None = Field(
        default=None,
        ge=0,
        description=f"Show at most this many lines (content) or entries (default "
        f"{DEFAULT_HEAD_LIMIT}; 0 means no limit, though the result is still cut at about "
        f"{RESULT_BUDGET_CHARS} characters).",
    )
    offset: LaxInt | None = Field(
        default=None,
        ge=0,
        description="Skip this many lines or entries first (to page through a long result).",
    )
    multiline: bool | None = Field(
        default=None,
        description="Let the pattern span lines ('.' also matches newlines). Default false.",
    )


def context_lines(args: GrepInput) -> int | None:
    if args.around is not None and args.context is not None and args.around != args.context:
        raise ToolInputError(
            f'"-C" ({args.around}) and context ({args.context}) mean the same thing but differ; '
            "give only one of them."
        )
    return args.around if args.around is not None else args.context


def scope_flags(args: GrepInput) -> list[str]:
    """ripgrep's flags for which files are searched and how lines match (not what is printed)."""
    flags = []
    if args.ignore_case:
        flags.append("--ignore-case")
    if args.multiline:
        flags += ["--multiline", "--multiline-dotall"]
    if args.glob:
        flags.append(f"--glob={args.glob}")
    # After the caller's glob, so that it wins over a broad one like "*".
    flags.append("--glob=!.git")
    if args.file_type:
        flags.append(f"--type={args.file_type}")
    return flags


def threads_flag(threads: int | None) -> list[str]:
    return [] if threads is None else [f"--threads={threads}"]


def build_argv(
    rg: Confined, args: GrepInput, search_path: Path | str, threads: int | None = None
) -> list[str]:
    """The exact ripgrep command line (an argv list; no shell ever sees it), confined as `rg`
    says; `threads` caps ripgrep's own parallelism (None: its default)."""
    argv = [
        *rg.command,
        "--no-config",
        "--color=never",
        "--no-heading",
        "--with-filename",
        "--hidden",
        f"--max-columns={MAX_COLUMNS}",
        "--max-columns-preview",
    ]
    argv += threads_flag(threads)
    argv += scope_flags(args)
    if args.output_mode == "files_with_matches":
        argv.append("--files-with-matches")
    elif args.output_mode == "count":
        argv += ["--count", "--sort=path", "--stats"]
    else:
        argv.append("--stats")
        # Sorting makes ripgrep single-threaded, but offset must page through a stable order.
        argv.append("--sort=path")
        argv.append("--no-line-number" if args.line_numbers is False else "--line-number")
        if args.after is not None:
            argv.append(f"--after-context={args.after}")
        if args.before is not None:
            argv.append(f"--before-context={args.before}")
        context = context_lines(args)
        if context is not None:
            argv.append(f"--context={context}")
        if args.only_matching:
            argv.append("--only-matching")
    argv += ["--", args.pattern, str(search_path)]
    return argv
