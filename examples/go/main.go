// Command tooljail-example calls a running tooljail daemon from Go: it lists the tools, executes a
// Read, a Bash command, a batch of three calls, and goes through a policy ASK with an approval token.
//
// It prints one "OK <step> ..." line per step and exits 1 with a "FAIL <step>: ..." line on the first
// unexpected answer, so it doubles as an interoperability check (scripts/interop.sh runs it).
//
//	go run . -target unix:///run/tooljail/tooljail.sock -read /path/in/workspace/file.txt
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tooljailv1 "example.com/tooljail/examples/go/gen/tooljail/v1"
)

const defaultTarget = "unix:///run/tooljail/tooljail.sock"

func main() {
	target := flag.String("target", cmp.Or(os.Getenv("TOOLJAIL_TARGET"), defaultTarget),
		"daemon address: unix:///path/to.sock or host:port (env TOOLJAIL_TARGET)")
	readPath := flag.String("read", os.Getenv("TOOLJAIL_READ_FILE"),
		"absolute path of a file inside the daemon's workspace to Read (env TOOLJAIL_READ_FILE)")
	expect := flag.String("expect", "", "text the Read result must contain (optional)")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of each call")
	flag.Parse()
	if *readPath == "" {
		fmt.Fprintln(os.Stderr, "FAIL usage: give -read /absolute/path/of/a/file/in/the/workspace")
		os.Exit(2)
	}

	// The daemon listens on a local socket without TLS; a remote daemon would take TLS credentials.
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL connect: %s: %v\n", *target, err)
		os.Exit(1)
	}
	defer conn.Close()

	c := &client{
		executor: tooljailv1.NewExecutorClient(conn),
		timeout:  *timeout,
		runID:    fmt.Sprintf("%x", time.Now().UnixNano()),
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"listtools", c.listTools},
		{"read", func() error { return c.read(*readPath, *expect) }},
		{"bash", c.bash},
		{"batch", func() error { return c.batch(*readPath) }},
		{"ask", c.askThenApprove},
	}
	for _, step := range steps {
		if err := step.run(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", step.name, err)
			conn.Close()
			os.Exit(1)
		}
	}
	fmt.Printf("PASS go client: %d steps against %s\n", len(steps), *target)
}
