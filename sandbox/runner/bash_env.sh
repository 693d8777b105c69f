# Sourced by bash through BASH_ENV before the command (sandbox/runner/runner.py), so the command
# string runs verbatim: error messages and line numbers are exactly bash's own. It records the
# final directory on descriptor 31 (runner.CWD_FD) at exit, and leaves no trace for nested bash.
unset BASH_ENV
trap 'builtin pwd -P >&31 2>/dev/null' EXIT
