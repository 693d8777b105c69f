package tooljail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGRPCTarget(t *testing.T) {
	for target, want := range map[string]string{
		"unix:///run/tooljail/tooljail.sock": "unix:///run/tooljail/tooljail.sock",
		"unix://relative.sock":               "unix:relative.sock",
		"unix:/abs.sock":                     "unix:/abs.sock",
		"127.0.0.1:50051":                    "127.0.0.1:50051",
		"dns:///tooljail.internal:443":       "dns:///tooljail.internal:443",
	} {
		if got := grpcTarget(target); got != want {
			t.Errorf("grpcTarget(%q) = %q, want %q", target, got, want)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(TargetVariable, "")
	t.Setenv(TokenVariable, "")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Target() != DefaultTarget {
		t.Errorf("target %q, want the default %q", c.Target(), DefaultTarget)
	}

	t.Setenv(TargetVariable, "unix:///tmp/elsewhere.sock")
	t.Setenv(TokenVariable, "secret")
	c2, err := FromEnv(WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Target() != "unix:///tmp/elsewhere.sock" || c2.timeout != time.Second {
		t.Errorf("target %q timeout %s", c2.Target(), c2.timeout)
	}
}

func TestDefaults(t *testing.T) {
	c, err := New("unix:///tmp/x.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.timeout != DefaultTimeout || c.retries != DefaultRetries || c.retryPause != DefaultRetryPause {
		t.Errorf("timeout %s retries %d pause %s", c.timeout, c.retries, c.retryPause)
	}
}

func TestBadOptionsAreErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, options := range map[string][]Option{
		"no key":           {WithClientCertificate("cert.pem", "")},
		"missing CA":       {WithTLS(missing)},
		"CA without PEM":   {WithTLS(notPEM)},
		"missing cert":     {WithClientCertificate(missing, missing)},
		"negative timeout": {WithTimeout(-time.Second)},
		"negative retries": {WithRetries(-1, 0)},
		"nil TLS config":   {WithTLSConfig(nil)},
	} {
		if c, err := New("127.0.0.1:1", options...); err == nil {
			c.Close()
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := New(""); err == nil {
		t.Error("an empty target: no error")
	}
}

func TestATokenIsNeverSentInClearOffThisMachine(t *testing.T) {
	for _, target := range []string{"daemon.example.org:50051", "10.0.0.5:50051", "dns:///daemon.example.org:443"} {
		if _, err := New(target, WithToken("s3cret-token")); err == nil || !strings.Contains(err.Error(), "in clear") {
			t.Errorf("New(%q) with a token and no TLS: err = %v, want a refusal", target, err)
		}
		client, err := New(target, WithToken(""))
		if err != nil {
			t.Errorf("New(%q) without a token: %v", target, err)
		} else {
			client.Close()
		}
	}
	for _, target := range []string{"127.0.0.1:50051", "localhost:50051", "[::1]:50051", "unix:///run/t.sock"} {
		client, err := New(target, WithToken("s3cret-token"))
		if err != nil {
			t.Errorf("New(%q) with a token: %v, want it allowed on this machine", target, err)
			continue
		}
		client.Close()
	}
}
