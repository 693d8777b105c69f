package tooljail_test

// A daemon killed in the middle of a call, and the same tool_use sent again to its successor.
//
// TOOLJAIL_TEST_SERVE is a command (split on spaces; no quoting) that, run as
// `$TOOLJAIL_TEST_SERVE <socket-path> <workspace> <state-dir>`, serves a daemon in the foreground
// on unix://<socket-path>; it must exec the daemon (or pass SIGTERM on to it). The test runs it
// in a process group of its own, so SIGKILL reaches the daemon and everything it started.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

// daemon is one run of the serve command.
type daemon struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func startDaemon(t *testing.T, serve []string, socket, workspace, state string, n int) *daemon {
	t.Helper()
	log := filepath.Join(filepath.Dir(socket), "daemon-"+strconv.Itoa(n)+".log")
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(serve[0], append(serve[1:], socket, workspace, state)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("TOOLJAIL_TEST_SERVE: %v", err)
	}
	d := &daemon{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// kill ends the daemon's whole process group at once, as a crash or an OOM kill would.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the daemon's process group: %v", err)
	}
	<-d.exited
}

// stop asks the daemon to stop (SIGTERM: it drains and removes its containers) and waits; after
// 30 s its process group is killed.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if !d.running() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if code := d.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("the daemon exited with %d after SIGTERM; log %s:\n%s", code, d.log, d.tail())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the daemon did not stop within 30 s of SIGTERM; killing it")
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
	}
}

func (d *daemon) tail() string {
	data, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// waitServing waits until the daemon answers ListTools.
func waitServing(t *testing.T, client *tooljail.Client, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.ListTools(ctx)
		cancel()
		if err == nil {
			return
		}
		if !d.running() {
			t.Fatalf("the daemon exited before it served; log %s:\n%s", d.log, d.tail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not serve within 90 s (%v); log %s:\n%s", err, d.log, d.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sandboxWorkspace makes a workspace the sandbox account can write: the account's and its
// group's when running as root (sandboxes never run as root; each principal's default session
// runs as a uid of its own with that group), else open to all.
func sandboxWorkspace(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o777); err != nil {
			t.Fatal(err)
		}
		return
	}
	account, err := user.Lookup("tooljail-sandbox")
	if err != nil {
		t.Fatalf("the sandbox account: %v (make sandbox-user creates it)", err)
	}
	uid, _ := strconv.Atoi(account.Uid)
	gid, _ := strconv.Atoi(account.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o770); err != nil {
		t.Fatal(err)
	}
}

// unmountBelow unmounts what a daemon left mounted below dir (the filesystem of fresh session
// workspaces stays mounted when it stops), so dir can be removed.
func unmountBelow(t *testing.T, dir string) {
	t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(info), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	slices.Sort(points)
	for _, point := range slices.Backward(points) {
		if out, err := exec.Command("umount", "--lazy", point).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", point, err, out)
		}
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func TestLiveRestartMidCall(t *testing.T) {
	serve := strings.Fields(need(t, "TOOLJAIL_TEST_SERVE"))
	// A short path under /tmp: a Unix socket path must stay under about 100 bytes.
	dir, err := os.MkdirTemp("/tmp", "tjgo.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountBelow(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("leaving %s: %v", dir, err)
		}
	})
	socket, workspace, state := filepath.Join(dir, "tj.sock"), filepath.Join(dir, "ws"), filepath.Join(dir, "state")
	sandboxWorkspace(t, workspace)
	count := filepath.Join(workspace, "count.txt")

	// No retries here: the test sees the failure itself. A short reconnection backoff, so the
	// same client finds the second daemon as soon as it listens.
	client, err := tooljail.New("unix://"+socket,
		tooljail.WithRetries(0, 0),
		tooljail.WithTimeout(2*time.Minute),
		tooljail.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		})))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	first := startDaemon(t, serve, socket, workspace, state, 1)
	waitServing(t, client, first)

	// Bash runs in the workspace; the line says it started, the sleep keeps it running.
	use := bash("echo ran >> count.txt; sleep 3")
	failed := make(chan error, 1)
	go func() {
		_, err := client.Execute(context.Background(), use)
		failed <- err
	}()
	deadline := time.Now().Add(60 * time.Second)
	for lines(t, count) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("count.txt got no line within 60 s; log %s:\n%s", first.log, first.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.kill(t)
	select {
	case err = <-failed:
	case <-time.After(30 * time.Second):
		t.Fatal("Execute did not return within 30 s of the daemon's death")
	}
	var rpcErr *tooljail.Error
	if !errors.Is(err, tooljail.ErrUnavailable) || !errors.As(err, &rpcErr) || rpcErr.Op != "Execute" {
		t.Fatalf("a call whose daemon died: err = %v, want an ErrUnavailable *Error", err)
	}
	t.Logf("the daemon killed mid-call: %v", err)

	second := startDaemon(t, serve, socket, workspace, state, 2)
	waitServing(t, client, second)
	// The new daemon never saw the id: the retry runs, once.
	retried, err := client.Execute(context.Background(), use)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	ran(t, retried)
	if retried.Report.Replayed || retried.ToolUseID != use.ID {
		t.Errorf("the retry: replayed %t, id %s: want a fresh run of %s", retried.Report.Replayed, retried.ToolUseID, use.ID)
	}
	if n := lines(t, count); n != 2 {
		t.Errorf("count.txt has %d lines after the retry, want 2", n)
	}
	// Now it is known: another retry is answered from memory, and nothing runs.
	again, err := client.Execute(context.Background(), use)
	if err != nil {
		t.Fatalf("the second retry: %v", err)
	}
	if !again.Report.Replayed || again.Decision.Outcome != tooljail.OutcomeAllow {
		t.Errorf("the second retry: replayed %t, decision %+v: want the remembered answer", again.Report.Replayed, again.Decision)
	}
	if n := lines(t, count); n != 2 {
		t.Errorf("count.txt has %d lines after the second retry, want still 2", n)
	}
	second.stop(t)
}
