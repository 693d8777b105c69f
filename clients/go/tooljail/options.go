package tooljail

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// DefaultTarget is the packaged service's socket, used when TOOLJAIL_TARGET is unset.
	DefaultTarget = "unix:///run/tooljail/tooljail.sock"
	// TargetVariable names the environment variable [FromEnv] reads the target from.
	TargetVariable = "TOOLJAIL_TARGET"
	// TokenVariable names the environment variable [FromEnv] reads the bearer token from.
	TokenVariable = "TOOLJAIL_TOKEN"
	// DefaultTimeout is the deadline of each call unless [WithTimeout] says otherwise.
	DefaultTimeout = 5 * time.Minute
	// DefaultRetries is how many times [Client.Execute] resends a call that got UNAVAILABLE.
	DefaultRetries = 2
	// DefaultRetryPause is the pause before the first retry; the n-th retry waits n times it.
	DefaultRetryPause = 500 * time.Millisecond
)

// Option configures a [Client] (see [New]).
type Option func(*settings) error

type settings struct {
	token      string
	tls        *tls.Config
	caFile     string
	certFile   string
	keyFile    string
	timeout    time.Duration
	retries    int
	retryPause time.Duration
	dial       []grpc.DialOption
}

// WithToken sends `authorization: Bearer <token>` with every call, as a TCP listener with tokens
// configured expects (an empty token sends nothing). Use it over TLS or on loopback only.
func WithToken(token string) Option {
	return func(s *settings) error {
		s.token = token
		return nil
	}
}

// WithTLS connects over TLS, trusting the certificates in caFile (PEM) to sign the daemon's
// certificate; an empty caFile trusts the system's roots.
func WithTLS(caFile string) Option {
	return func(s *settings) error {
		if s.tls == nil {
			s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		s.caFile = caFile
		return nil
	}
}

// WithClientCertificate presents certFile and keyFile (PEM) to the daemon (mTLS); it implies TLS
// (with the system's roots unless [WithTLS] names a CA file).
func WithClientCertificate(certFile, keyFile string) Option {
	return func(s *settings) error {
		if certFile == "" || keyFile == "" {
			return errors.New("tooljail: give both a certificate file and a key file for mTLS")
		}
		if s.tls == nil {
			s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		s.certFile, s.keyFile = certFile, keyFile
		return nil
	}
}

// WithTLSConfig connects over TLS with config as it is (roots, client certificates, server name),
// for what [WithTLS] and [WithClientCertificate] do not cover.
func WithTLSConfig(config *tls.Config) Option {
	return func(s *settings) error {
		if config == nil {
			return errors.New("tooljail: WithTLSConfig needs a non-nil config")
		}
		s.tls = config.Clone()
		return nil
	}
}

// WithTimeout sets the deadline of each call (each attempt, when retried), on top of the
// context's own; 0 means none. The default is [DefaultTimeout].
func WithTimeout(timeout time.Duration) Option {
	return func(s *settings) error {
		if timeout < 0 {
			return fmt.Errorf("tooljail: negative timeout %s", timeout)
		}
		s.timeout = timeout
		return nil
	}
}

// WithRetries sets how many times [Client.Execute] resends a call that could not reach the
// daemon (UNAVAILABLE), with the same tool_use id, pausing pause, then twice pause, and so on
// between attempts. 0 disables retries. The default is [DefaultRetries] and [DefaultRetryPause].
//
// A retry never runs a call twice while the daemon that received it is up: it waits for the first
// run or gets its remembered answer. A daemon that restarted has forgotten the id, so a call that
// was running when it died runs again.
func WithRetries(retries int, pause time.Duration) Option {
	return func(s *settings) error {
		if retries < 0 || pause < 0 {
			return fmt.Errorf("tooljail: negative retries (%d) or pause (%s)", retries, pause)
		}
		s.retries, s.retryPause = retries, pause
		return nil
	}
}

// WithDialOptions adds gRPC dial options (interceptors, keepalive, a custom dialer...).
func WithDialOptions(options ...grpc.DialOption) Option {
	return func(s *settings) error {
		s.dial = append(s.dial, options...)
		return nil
	}
}

// grpcTarget is target as grpc-go resolves it: "unix://relative.sock" (two slashes) means a
// relative path, which grpc-go only accepts as "unix:relative.sock".
func grpcTarget(target string) string {
	if rest, ok := strings.CutPrefix(target, "unix://"); ok && !strings.HasPrefix(rest, "/") {
		return "unix:" + rest
	}
	return target
}

func (s *settings) dialOptions() ([]grpc.DialOption, error) {
	transport := insecure.NewCredentials()
	if s.tls != nil {
		config := s.tls.Clone()
		if s.caFile != "" {
			pem, err := os.ReadFile(s.caFile)
			if err != nil {
				return nil, fmt.Errorf("tooljail: CA file: %w", err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tooljail: CA file %s holds no PEM certificate", s.caFile)
			}
			config.RootCAs = roots
		}
		if s.certFile != "" {
			pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
			if err != nil {
				return nil, fmt.Errorf("tooljail: client certificate: %w", err)
			}
			config.Certificates = []tls.Certificate{pair}
		}
		transport = credentials.NewTLS(config)
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if s.token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer{"Bearer " + s.token}))
	}
	return append(options, s.dial...), nil
}

// onThisMachine reports whether target is a Unix socket or a loopback address, where a token
// sent in the clear does not leave the machine.
func onThisMachine(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	address := target
	for _, scheme := range []string{"dns:///", "passthrough:///", "ipv4:", "ipv6:"} {
		address = strings.TrimPrefix(address, scheme)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer adds the authorization header the daemon maps to a principal. It does not insist on
// TLS: a Unix socket or a loopback TCP listener may take a token in the clear (New refuses a
// token in the clear for any other target).
type bearer struct{ header string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }

// CallOption sets a field of one request. Options that do not apply to a method are ignored
// (an approval token on ListTools, for instance).
type CallOption func(*call)

type call struct {
	session       string
	approvalToken string
	approvalScope string
	turnID        string
	deferred      bool
}

func callOf(options []CallOption) call {
	var c call
	for _, option := range options {
		option(&c)
	}
	return c
}

// WithSession runs the call in a session (see [Client.OpenSession]); without it the call runs in
// the caller's default session, over the daemon's workspace.
func WithSession(sessionID string) CallOption {
	return func(c *call) { c.session = sessionID }
}

// WithApprovalToken sends the approval token a [Decision] of [OutcomeAsk] carried: send the same
// tool_use (same id, same input) again with it once a person approved.
func WithApprovalToken(token string) CallOption {
	return func(c *call) { c.approvalToken = token }
}

// WithApprovalScope asks, with an approval token, for "once" (the default) or "session" (the
// same tool and command prefix or path pattern is allowed for the rest of the session).
func WithApprovalScope(scope Scope) CallOption {
	return func(c *call) { c.approvalScope = string(scope) }
}

// WithTurnID puts calls of one assistant turn sent one by one under one turn budget, as the calls
// of an [Client.ExecuteBatch] are: give them the same id (any string; per session, for 60 s).
func WithTurnID(turnID string) CallOption {
	return func(c *call) { c.turnID = turnID }
}

// WithDeferred makes [Client.ListTools] also return deferred tools (found through ToolSearch
// otherwise).
func WithDeferred() CallOption {
	return func(c *call) { c.deferred = true }
}
