"""A real systemd, booted in a container, with tooljail installed in it as an operator does.

The machine: the image `scripts/build-service-image.sh` builds (Debian bookworm, systemd as PID 1),
run without --privileged: SYS_ADMIN, no seccomp or AppArmor profile, the host's /sys/fs/cgroup,
tmpfs on /run, /run/lock and /tmp. It boots to `systemctl is-system-running` = running.

In it, tooljail goes in the way docs/operations.md says: `make install` from the checkout (mounted
read-only at /src), the account from `packaging/systemd/tooljail.sysusers`, /etc/tooljail from
`packaging/systemd/tooljail.tmpfiles`, the example config copied to /etc/tooljail/tooljail.toml,
the sandbox account with the daemon in its group, `systemctl link` of the installed unit. The unit
is used as installed; what the harness changes is in drop-ins, each named below.

Paths the daemon hands to Docker. The daemon talks to the host's dockerd through the host's socket
(bind-mounted at /run/docker.sock; a `docker` group is made inside with the socket's gid, as the
docker package would make it, so the unit's SupplementaryGroups=docker grants it). dockerd resolves
every bind-mount source in the HOST's mount namespace, and the daemon gives it three kinds: the
workspace, the runner folder of the installed package, and the egress folders under state_dir. So
the harness makes one folder per run on the host, `/var/lib/tooljail-svc/tjsvc-<8 hex>` (`root`
below), and bind-mounts it into the machine at the same path; everything Docker is asked to mount
lives in it:

    <root>/prefix              PREFIX of `make install` (the runner is under lib/tooljail/...)
    <root>/state               state_dir (TOOLJAIL_STATE_DIR), owned by tooljail, 0750
    <root>/state/workspace     the default workspace (TOOLJAIL_WORKSPACE), made by the daemon
    <root>/install-logs        where install.sh writes its pip log (/src/.tools/logs inside: the
                               checkout is read-only and install.sh logs into it)

A path seen by the daemon is then the same file for dockerd. The installed defaults
(/var/lib/tooljail, /usr/local) are not used for this because they are one per host: two test runs
at once, or a host install, would share them. The path is kept short on purpose: the egress proxy's
socket (<state_dir>/egress/<16>/<24>/proxy.sock) must fit a socket address (107 bytes), and with a
state_dir longer than 47 characters the daemon moves it to its runtime folder (/run/tooljail),
which in this machine is a tmpfs of the machine's own that dockerd cannot see. The service may
write the state folder through the drop-in `ReadWritePaths=<root>/state`, the one
docs/operations.md prescribes for workspaces outside /var/lib/tooljail. Each run also gets its own
instance id (TOOLJAIL_INSTANCE_ID=<name>): the default is derived from the listen address, which
every installed daemon shares, and a daemon reaps the containers of its instance id at start, so a
run must never share one with anything else on this dockerd.

The host's CA bundle is mounted over the machine's (this network intercepts TLS, and pip inside
needs its roots). The pip cache under .tools/cache/service-pip is kept between runs; it only helps
where the package index sends caching headers (this machine's proxy strips them, so each install
here downloads its dependencies again, about 40 s).

A run killed before its teardown leaves its machine: `docker ps --filter label=io.tooljail.
service-test` lists them (`docker rm -f` one, then remove its folder under /var/lib/tooljail-svc).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.backend import LABEL_INSTANCE

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-service-image.sh"
SANDBOX_IMAGE_SCRIPT = REPO_ROOT / "sandbox" / "image" / "build.sh"
HOST_RUNS = Path("/var/lib/tooljail-svc")
PIP_CACHE = REPO_ROOT / ".tools" / "cache" / "service-pip"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKER_SOCKET = Path("/var/run/docker.sock")
SOURCE = "/src"
UNIT = "tooljail.service"
DROP_INS = Path("/etc/systemd/system/tooljail.service.d")
CONFIG = "/etc/tooljail/tooljail.toml"
AUDIT_LOG = "/var/log/tooljail/audit.jsonl"
CALLER = "alice"
"""A person allowed to call the daemon: a member of group tooljail, nothing else."""
SANDBOX_USER = "tooljail-sandbox"
#: The drop-in with the harness's paths; every other drop-in is a test's and goes between tests.
HARNESS_DROP_IN = "50-harness"
#: Labels the machine's container, so a leftover of a killed run can be found.
MACHINE_LABEL = "io.tooljail.service-test"


class HarnessError(RuntimeError):
    """The machine could not be built, booted or set up (not a finding about tooljail)."""


def _docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=check
    )


def streamed(argv: Sequence[str], *, timeout: float) -> None:
    """Runs a long step with its output passed through (the caller shows it live), or raises."""
    try:
        subprocess.run(argv, check=True, timeout=timeout, stdout=None, stderr=None)
    except subprocess.CalledProcessError as exc:
        raise HarnessError(f"{shlex.join(argv)} failed with exit {exc.returncode}") from exc


def build_images() -> str:
    """The systemd image's tag, built when its recipe changed; the sandbox image too."""
    streamed([str(SANDBOX_IMAGE_SCRIPT)], timeout=1200)
    streamed([str(BUILD_SCRIPT)], timeout=1200)
    tag = subprocess.run(
        [str(BUILD_SCRIPT), "--tag"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    if _docker("image", "inspect", tag, check=False).returncode != 0:
        raise HarnessError(f"{BUILD_SCRIPT} finished but {tag} is not there")
    return tag


@dataclass(frozen=True)
class Answer:
    """What `tooljail call --json` printed for one call."""

    raw: dict[str, Any]

    @property
    def outcome(self) -> str:
        return str(self.raw.get("decision", {}).get("outcome", ""))

    @property
    def revision(self) -> str:
        return str(self.raw.get("decision", {}).get("policyRevision", ""))

    @property
    def text(self) -> str:
        content = self.raw.get("result", {}).get("content", [])
        return "".join(part.get("text", {}).get("text", "") for part in content)

    @property
    def is_error(self) -> bool:
        block = json.loads(self.raw.get("toolResultJson", "{}"))
        return bool(block.get("is_error", False))

    def __str__(self) -> str:
        return f"[{self.outcome}{', error' if self.is_error else ''}] {self.text[:400]!r}"


@dataclass
class Machine:
    """The booted systemd container and the run folder shared with the host."""

    name: str
    root: Path
    docker_gid: int
    boot_state: str = ""
    failed_units: dict[str, str] = field(default_factory=dict)

    @property
    def prefix(self) -> Path:
        return self.root / "prefix"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def workspace(self) -> Path:
        return self.state / "workspace"

    @property
    def policies(self) -> Path:
        return self.prefix / "share" / "tooljail" / "policies"

    @property
    def instance(self) -> str:
        return self.name

    # --- running things inside ------------------------------------------------------------------
    def run(
        self,
        *argv: str,
        user: str | None = None,
        check: bool = True,
        timeout: float = 120,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`docker exec` in the machine; CalledProcessError (with its output) when check fails."""
        cmd = ["docker", "exec", *(["--interactive"] if stdin is not None else [])]
        cmd += [*(["--user", user] if user else []), self.name, *argv]
        done = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
        return done

    def sh(self, script: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run("bash", "-euo", "pipefail", "-c", script, **kwargs)

    def write(self, path: str | Path, text: str, mode: str = "0644", owner: str = "root") -> None:
        self.run(
            "install", "-D", "-m", mode, "-o", owner, "-g", owner, "/dev/stdin", str(path),
            stdin=text,
        )  # fmt: skip

    # --- the service ----------------------------------------------------------------------------
    def systemctl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        return self.run("systemctl", *args, check=check, timeout=timeout).stdout

    def show(self, *props: str) -> dict[str, str]:
        out = self.systemctl("show", UNIT, "--property", ",".join(props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self) -> int:
        return int(self.show("MainPID")["MainPID"])

    def set_drop_in(self, name: str, text: str) -> None:
        """Writes /etc/systemd/system/tooljail.service.d/<name>.conf, then daemon-reload."""
        self.write(DROP_INS / f"{name}.conf", text)
        self.systemctl("daemon-reload")

    def reset(self, keep: Sequence[str] = (HARNESS_DROP_IN,)) -> None:
        """Stops the service and puts everything a test may change back as installed: drop-ins
        other than `keep`, the policies, the workspace, the failed state and restart counter."""
        self.systemctl("stop", UNIT, check=False)
        self.systemctl("reset-failed", UNIT, check=False)
        kept = " ".join(shlex.quote(f"{name}.conf") for name in keep)
        self.sh(
            f'cd {DROP_INS} && for f in *.conf; do case " {kept} " in *" $f "*) ;; '
            '*) rm -f -- "$f" ;; esac; done; '
            f"rm -rf {self.policies} && cp -a {self.root}/policies.installed {self.policies}; "
            f"rm -rf {self.workspace}"
        )
        self.systemctl("daemon-reload")

    def start(self) -> subprocess.CompletedProcess[str]:
        """`systemctl start`: with Type=notify it returns once READY=1 came (or start failed)."""
        return self.run("systemctl", "start", UNIT, check=False, timeout=180)

    def seed_workspace(self) -> Path:
        """A file for reads in the default workspace (made by the daemon at start)."""
        hello = self.workspace / "hello.txt"
        self.write(hello, "hello from the service\n", owner=SANDBOX_USER)
        return hello

    def call(
        self, tool: str, tool_input: dict[str, Any], *, tool_use_id: str = "", timeout: float = 120
    ) -> Answer:
        """One `tooljail call --json` as the caller (group tooljail) on the default socket."""
        args = [str(self.prefix / "bin" / "tooljail"), "call", "--json"]
        args += ["--id", tool_use_id] if tool_use_id else []
        done = self.run(
            *args, tool, json.dumps(tool_input), user=CALLER, check=False, timeout=timeout
        )
        try:
            raw, _ = json.JSONDecoder().raw_decode(done.stdout.lstrip())
        except json.JSONDecodeError:
            raise AssertionError(
                f"tooljail call {tool} printed no answer (exit {done.returncode}): "
                f"{done.stdout[-800:]}{done.stderr[-800:]}"
            ) from None
        return Answer(raw)

    def call_process(self, tool: str, tool_input: dict[str, Any], tool_use_id: str) -> Any:
        """The same call, started and not waited for (a Popen whose stdout is the answer)."""
        return subprocess.Popen(
            ["docker", "exec", "--user", CALLER, self.name, str(self.prefix / "bin" / "tooljail"),
             "call", "--json", "--id", tool_use_id, tool, json.dumps(tool_input)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    # --- what can be seen of it -----------------------------------------------------------------
    def cursor(self) -> str:
        """The journal's current end, to read only what comes after it."""
        out = self.run("journalctl", "--output=json", "--lines=1", "--no-pager").stdout
        return str(json.loads(out.splitlines()[-1])["__CURSOR"])

    def journal(self, after: str) -> list[dict[str, Any]]:
        """The unit's journal entries after a cursor (systemd's own lines included)."""
        out = self.run(
            "journalctl", f"--unit={UNIT}", f"--after-cursor={after}", "--output=json",
            "--no-pager", timeout=60,
        ).stdout  # fmt: skip
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def journal_text(self, after: str) -> str:
        return "\n".join(message(entry) for entry in self.journal(after))

    def audit(self) -> list[dict[str, Any]]:
        out = self.run("cat", AUDIT_LOG, check=False).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def containers(self) -> list[str]:
        """Ids of the host's containers (any state) labelled with this run's instance."""
        out = _docker(
            "ps",
            "--all",
            "--quiet",
            "--no-trunc",
            "--filter",
            f"label={LABEL_INSTANCE}={self.instance}",
        ).stdout
        return out.split()


def message(entry: dict[str, Any]) -> str:
    """A journal entry's MESSAGE (journald gives bytes as a list of numbers when not UTF-8)."""
    value = entry.get("MESSAGE", "")
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def daemon_lines(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries the service's processes wrote to stdout/stderr (not systemd's own)."""
    return [entry for entry in entries if entry.get("_TRANSPORT") == "stdout"]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.5) -> Any:
    """Polls until check() is truthy and returns it; AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


# --- the machine's life ---------------------------------------------------------------------------
def _booted_state(machine: Machine) -> str:
    """The state systemd ended its boot in; "" while it has not yet started to boot."""
    state = machine.run(
        "systemctl", "is-system-running", "--wait", check=False, timeout=180
    ).stdout.strip()
    return "" if state == "offline" else state


def boot(image: str) -> Machine:
    """Starts the systemd container (detached, a unique name) and waits for the boot to end."""
    name = f"tjsvc-{secrets.token_hex(4)}"
    root = HOST_RUNS / name
    (root / "install-logs").mkdir(parents=True)
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    # Docker makes no mount point inside a read-only bind: the folder must exist in the checkout.
    (REPO_ROOT / ".tools" / "logs").mkdir(parents=True, exist_ok=True)
    machine = Machine(name=name, root=root, docker_gid=DOCKER_SOCKET.stat().st_gid)
    _docker(
        "run", "--detach", "--name", name, "--hostname", "tooljail-service",
        "--label", f"{MACHINE_LABEL}={name}",
        "--stop-signal", "SIGRTMIN+3",
        "--cap-add", "SYS_ADMIN",
        "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        "--volume", "/sys/fs/cgroup:/sys/fs/cgroup",
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        "--volume", f"{REPO_ROOT}:{SOURCE}:ro",
        "--volume", f"{root / 'install-logs'}:{SOURCE}/.tools/logs",
        "--volume", f"{PIP_CACHE}:/root/.cache/pip",
        "--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
        "--volume", f"{DOCKER_SOCKET.resolve()}:/run/docker.sock",
        "--volume", f"{root}:{root}",
        image,
    )  # fmt: skip
    try:
        # Until systemd's private socket is up, systemctl prints nothing and fails at once; until
        # it has made /run/systemd/system (a fresh tmpfs here), it prints "offline" (CI, loaded).
        state = wait_for(
            "systemd to answer systemctl",
            lambda: _booted_state(machine),
            180,
        )
        machine.boot_state = state
        if state not in ("running", "degraded"):
            raise HarnessError(f"systemd in {name} ended its boot as {state!r}")
        for line in machine.systemctl(
            "list-units", "--failed", "--plain", "--no-legend"
        ).splitlines():
            unit = line.split()[0]
            machine.failed_units[unit] = machine.run(
                "journalctl", "--unit", unit, "--boot", "--no-pager", "--output=cat", check=False
            ).stdout[-2000:]
    except BaseException:
        remove(machine)
        raise
    return machine


def install(machine: Machine, sandbox_uid: int) -> None:
    """Installs tooljail in the machine as docs/operations.md tells an operator to (root)."""
    prefix, state = machine.prefix, machine.state
    streamed(
        ["docker", "exec", machine.name, "make", "-C", SOURCE, "install", f"PREFIX={prefix}"],
        timeout=900,
    )
    busy = machine.run("getent", "group", str(machine.docker_gid), check=False).stdout.strip()
    if busy and not busy.startswith("docker:"):
        raise HarnessError(
            f"the Docker socket's gid {machine.docker_gid} is taken in the image by {busy!r}"
        )
    # What only this harness needs: the socket's group, a caller, the run's state folder.
    machine.sh(
        f"""
        getent group docker >/dev/null || groupadd --system --gid {machine.docker_gid} docker
        systemctl link {prefix}/lib/systemd/system/{UNIT}
        """,
        timeout=120,
    )
    machine.set_drop_in(
        HARNESS_DROP_IN,
        "# The test harness: paths shared with the host's dockerd (tests/service/harness.py).\n"
        "[Service]\n"
        f"Environment=TOOLJAIL_STATE_DIR={state} TOOLJAIL_WORKSPACE={machine.workspace}\n"
        f"Environment=TOOLJAIL_INSTANCE_ID={machine.instance}\n"
        f"ReadWritePaths={state}\n",
    )
    # docs/operations.md's steps, as an operator runs them (their own prefix and uid). The run's
    # state folder (the drop-in's) is the account's as soon as the account exists.
    for step in operator_steps(prefix, sandbox_uid):
        machine.sh(step, timeout=120)
        if step.startswith("systemd-sysusers "):
            machine.sh(f"install -d -o tooljail -g tooljail -m 0750 {state}", timeout=60)
    machine.sh(
        f"""
        useradd --create-home --groups tooljail {CALLER}
        cp -a {machine.policies} {machine.root}/policies.installed
        systemctl stop {UNIT}
        """,
        timeout=120,
    )


OPERATIONS = REPO_ROOT / "docs" / "operations.md"
STEPS_HEADING = "Then, once per host, as root:"


def operator_steps(prefix: Path, sandbox_uid: int) -> list[str]:
    """The commands docs/operations.md tells an operator to run once per host, as this harness
    runs them: the prefix is the run's (not /usr/local), the `tooljail` command is the prefix's,
    the sandbox account gets the host's uid for it (files in the shared workspace then belong to
    the same account on both sides), and `make image` is left out: the sandbox image is the
    host's dockerd's, built by the test setup (build_images). Anything else the page changes
    runs as it is written."""
    text = OPERATIONS.read_text()
    block = text.split(STEPS_HEADING, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    steps = []
    for line in block.splitlines():
        command = line.split("#", 1)[0].strip()
        if not command or command == "make image":
            continue
        command = command.replace("/usr/local/", f"{prefix}/")
        if command.startswith("tooljail "):
            command = f"{prefix}/bin/{command}"
        if command.startswith("useradd --user-group "):
            command = command.replace("useradd ", f"useradd --uid {sandbox_uid} ", 1)
        steps.append(command)
    if len(steps) < 6:
        raise HarnessError(f"{OPERATIONS}: no install steps found after {STEPS_HEADING!r}")
    return steps


def remove(machine: Machine) -> list[str]:
    """Stops the service, removes the machine and the run folder; returns what had to be
    cleaned up by force (containers of the instance left on the host)."""
    leftovers: list[str] = []
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        machine.systemctl("stop", UNIT, check=False, timeout=90)
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        leftovers = machine.containers()
        if leftovers:
            _docker("rm", "--force", *leftovers, check=False)
    _docker("rm", "--force", "--volumes", machine.name, check=False, timeout=180)
    shutil.rmtree(machine.root, ignore_errors=True)
    with contextlib.suppress(OSError):
        HOST_RUNS.rmdir()  # only when no other run is using it
    return leftovers
