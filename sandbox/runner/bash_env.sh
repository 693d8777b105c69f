# Sourced by bash through BASH_ENV before the command (sandbox/runner/runner.py), so the command
# string runs verbatim: error messages and line numbers are exactly bash's own. It first waits
# for the runner's go on descriptor 30 (runner.GO_FD: the runner wears the command's ids while it
# spawns bash, and the command must not run before it is root again), records the final
# directory on descriptor 31 (runner.CWD_FD) at exit, and leaves no trace for nested bash.
read -r -n 1 -u 30 __tooljail_go 2>/dev/null
exec 30<&-
unset BASH_ENV __tooljail_go
trap 'builtin pwd -P >&31 2>/dev/null' EXIT
