// Command tooljail-example calls a running tooljail daemon from Go through the client package
// (clients/go): it lists the tools, executes a Read, a Bash command, a batch of three calls, and
// goes through a policy ASK with an approval token.
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

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

func main() {
	target := flag.String("target", cmp.Or(os.Getenv(tooljail.TargetVariable), tooljail.DefaultTarget),
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

	// A local socket needs no credentials; a daemon on TCP takes TOOLJAIL_TOKEN and/or TLS options.
	client, err := tooljail.New(*target,
		tooljail.WithToken(os.Getenv(tooljail.TokenVariable)), tooljail.WithTimeout(*timeout))
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL connect: %s: %v\n", *target, err)
		os.Exit(1)
	}
	defer client.Close()

	ex := &example{client: client}
	steps := []struct {
		name string
		run  func() error
	}{
		{"listtools", ex.listTools},
		{"read", func() error { return ex.read(*readPath, *expect) }},
		{"bash", ex.bash},
		{"batch", func() error { return ex.batch(*readPath) }},
		{"ask", ex.askThenApprove},
	}
	for _, step := range steps {
		if err := step.run(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", step.name, err)
			client.Close()
			os.Exit(1)
		}
	}
	fmt.Printf("PASS go client: %d steps against %s\n", len(steps), *target)
}
