package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// newClientCert makes a self-signed client certificate (as the vnode's).
func newClientCert(t *testing.T, cn string) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, fingerprint(der)
}

func mustDecodeHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPinning: real crypto/tls listener with the agent's TLS config; only the pinned client
// certificate completes a handshake.
func TestPinning(t *testing.T) {
	serverCert, _, err := loadOrCreateServerCert(t.TempDir(), "i-test", net.ParseIP("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	pinned, pinnedFP := newClientCert(t, "vnode")
	other, _ := newClientCert(t, "intruder")
	_, secondFP := newClientCert(t, "vnode-next")

	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTLSConfig(serverCert,
		[][]byte{mustDecodeHex(t, secondFP), mustDecodeHex(t, pinnedFP)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	serverErrs := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				err := tc.Handshake()
				serverErrs <- err
				if err == nil {
					_, _ = tc.Write([]byte("hi"))
				}
			}()
		}
	}()

	try := func(certs []tls.Certificate, version uint16) (clientErr, serverErr error) {
		roots := x509.NewCertPool()
		roots.AddCert(serverCert.Leaf)
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
			RootCAs: roots, Certificates: certs, MinVersion: version, MaxVersion: version,
		})
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			// With TLS 1.3 the client learns of a refusal at its first read.
			buf := make([]byte, 2)
			_, err = io.ReadFull(c, buf)
			c.Close()
		}
		return err, <-serverErrs
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		name := map[uint16]string{tls.VersionTLS12: "TLS1.2", tls.VersionTLS13: "TLS1.3"}[version]
		t.Run(name+" pinned", func(t *testing.T) {
			if c, s := try([]tls.Certificate{pinned}, version); c != nil || s != nil {
				t.Fatalf("pinned client refused: client %v, server %v", c, s)
			}
		})
		t.Run(name+" no cert", func(t *testing.T) {
			c, s := try(nil, version)
			if c == nil || s == nil {
				t.Fatalf("accepted without a client certificate: client %v, server %v", c, s)
			}
		})
		t.Run(name+" other cert", func(t *testing.T) {
			c, s := try([]tls.Certificate{other}, version)
			if c == nil || s == nil || !strings.Contains(s.Error(), "not pinned") {
				t.Fatalf("accepted another certificate: client %v, server %v", c, s)
			}
		})
	}
	t.Run("TLS1.1 refused", func(t *testing.T) {
		c, s := try([]tls.Certificate{pinned}, tls.VersionTLS11)
		if c == nil || s == nil {
			t.Fatalf("TLS 1.1 accepted: client %v, server %v", c, s)
		}
	})
}

func TestStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ip := net.ParseIP("10.1.2.3")
	cert, created, err := loadOrCreateServerCert(dir, "i-0123456789abcdef0", ip)
	if err != nil || !created {
		t.Fatalf("first start: created %v, err %v", created, err)
	}
	leaf := cert.Leaf
	if leaf.Subject.CommonName != "i-0123456789abcdef0" {
		t.Errorf("CN %q", leaf.Subject.CommonName)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(ip) {
		t.Errorf("IP SANs %v", leaf.IPAddresses)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("key usage %v, ext %v", leaf.KeyUsage, leaf.ExtKeyUsage)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || leaf.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("public key %T", leaf.PublicKey)
	}
	if years := leaf.NotAfter.Sub(time.Now()).Hours() / 24 / 365; years < 9.9 || years > 10.1 {
		t.Errorf("valid %.1f years", years)
	}
	for name, mode := range map[string]os.FileMode{certFile: 0o644, keyFile: 0o600, fingerprintFile: 0o644} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), mode)
		}
	}
	fp, _ := os.ReadFile(filepath.Join(dir, fingerprintFile))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(fp) {
		t.Errorf("fingerprint %q: want 64 lowercase hex digits, no newline", fp)
	}
	if string(fp) != fingerprint(cert.Certificate[0]) {
		t.Errorf("fingerprint file %s, certificate %s", fp, fingerprint(cert.Certificate[0]))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("state dir holds %d entries, want 3 (no temporary files left)", len(entries))
	}

	// A later start reuses them.
	again, created, err := loadOrCreateServerCert(dir, "i-0123456789abcdef0", ip)
	if err != nil || created {
		t.Fatalf("second start: created %v, err %v", created, err)
	}
	if !bytes.Equal(again.Certificate[0], cert.Certificate[0]) {
		t.Error("second start made a new certificate")
	}
	// A lost fingerprint file is written again.
	os.Remove(filepath.Join(dir, fingerprintFile))
	if _, created, err = loadOrCreateServerCert(dir, "i-0123456789abcdef0", ip); err != nil || created {
		t.Fatalf("third start: created %v, err %v", created, err)
	}
	if fp2, _ := os.ReadFile(filepath.Join(dir, fingerprintFile)); !bytes.Equal(fp2, fp) {
		t.Errorf("fingerprint rewritten as %q, want %q", fp2, fp)
	}
	// Files that do not parse are replaced.
	os.WriteFile(filepath.Join(dir, keyFile), []byte("garbage"), 0o600)
	fresh, created, err := loadOrCreateServerCert(dir, "i-0123456789abcdef0", ip)
	if err != nil || !created || bytes.Equal(fresh.Certificate[0], cert.Certificate[0]) {
		t.Fatalf("corrupt key: created %v, err %v", created, err)
	}
	if fp3, _ := os.ReadFile(filepath.Join(dir, fingerprintFile)); string(fp3) != fingerprint(fresh.Certificate[0]) {
		t.Error("fingerprint not updated for the new certificate")
	}
}

func TestParseRoute(t *testing.T) {
	tests := []struct {
		path string
		want route
		ok   bool
	}{
		{"/exec/ns/pod/app", route{kind: "exec", namespace: "ns", pod: "pod", container: "app"}, true},
		{"/exec/ns/pod/uid-1/app", route{kind: "exec", namespace: "ns", pod: "pod", uid: "uid-1", container: "app"}, true},
		{"/attach/ns/pod/app", route{kind: "attach", namespace: "ns", pod: "pod", container: "app"}, true},
		{"/attach/ns/pod/uid-1/app", route{kind: "attach", namespace: "ns", pod: "pod", uid: "uid-1", container: "app"}, true},
		{"/portForward/ns/pod", route{kind: "portForward", namespace: "ns", pod: "pod"}, true},
		{"/portForward/ns/pod/uid-1", route{kind: "portForward", namespace: "ns", pod: "pod", uid: "uid-1"}, true},
		{"/exec/ns/p%6Fd/app", route{kind: "exec", namespace: "ns", pod: "pod", container: "app"}, true},
		{"/exec/ns/pod", route{}, false},
		{"/exec/ns/pod/uid/app/extra", route{}, false},
		{"/exec/ns//app", route{}, false},
		{"/exec/ns/pod/app/", route{}, false},
		{"/exec/ns/a%2Fb/app", route{}, false},
		{"/portforward/ns/pod", route{}, false}, // the kubelet's path is camel-case
		{"/portForward/ns", route{}, false},
		{"/run/ns/pod/app", route{}, false},
		{"/containerLogs/ns/pod/app", route{}, false},
		{"/", route{}, false},
	}
	for _, tt := range tests {
		got, ok := parseRoute(tt.path)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func testConfig() *config {
	return &config{
		namespace: "default", pod: "web", podUID: "uid-1",
		containers: map[string]string{"app": "nebula-app"}, containerOrder: []string{"app"},
		docker: "docker-not-called", maxSessions: 1,
		idleTimeout: time.Minute, streamCreation: time.Second,
	}
}

// TestHandlerAnswers: the plain HTTP answers, before any stream (no docker involved).
func TestHandlerAnswers(t *testing.T) {
	a := newAgent(testConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	tests := []struct {
		method, target string
		code           int
		body           string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/exec/default/other/app?command=ls&output=1", 404, "pod does not exist\n"},
		{"GET", "/exec/kube-system/web/app?command=ls&output=1", 404, "pod does not exist\n"},
		{"GET", "/exec/default/web/uid-2/app?command=ls&output=1", 404, "pod does not exist\n"},
		{"POST", "/exec/default/web/nope?command=ls&output=1", 404, "container not found (\"nope\")\n"},
		{"GET", "/attach/default/web/uid-1/nope?output=1", 404, "container not found (\"nope\")\n"},
		{"GET", "/portForward/default/other", 404, "pod does not exist\n"},
		{"GET", "/portForward/default/web/uid-2", 404, "pod does not exist\n"},
		{"GET", "/exec/default/web/app?command=ls", 400, "you must specify at least 1 of stdin, stdout, stderr\n"},
		{"GET", "/logs/", 404, "404 page not found\n"},
		{"PUT", "/exec/default/web/app?command=ls&output=1", 404, "404 page not found\n"},
		// A session slot is taken, then the SPDY handshake fails (no upgrade headers).
		{"POST", "/exec/default/web/uid-1/app?command=ls&output=1", 400, ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
		if rec.Code != tt.code || (tt.body != "" && rec.Body.String() != tt.body) {
			t.Errorf("%s %s: %d %q; want %d %q", tt.method, tt.target, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
	}

	// All slots taken: 429, plain text.
	a.slots <- struct{}{}
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("POST", "/exec/default/web/app?command=ls&output=1", nil))
	if rec.Code != http.StatusTooManyRequests || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") ||
		!strings.Contains(rec.Body.String(), "too many sessions") {
		t.Errorf("with no slot left: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	<-a.slots
}

func TestFlags(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	full := []string{
		"--listen", "10.0.0.5:10250", "--state-dir", "/var/lib/nebula-agent", "--name", "i-1",
		"--client-fingerprint", fp, "--namespace", "default", "--pod", "web", "--pod-uid", "u",
		"--container", "app=nebula-app",
	}
	var out, errOut bytes.Buffer
	cfg, err := parseFlags(full, &out, &errOut)
	if err != nil {
		t.Fatalf("full command line: %v (%s)", err, errOut.String())
	}
	if cfg.docker != "docker" || cfg.maxSessions != 64 || cfg.idleTimeout != 4*time.Hour ||
		cfg.streamCreation != 30*time.Second || cfg.sandbox != "" || cfg.containers["app"] != "nebula-app" {
		t.Errorf("defaults: %+v", cfg)
	}

	// Each required flag left out: exit 2, and the message names it.
	for i := 0; i < len(full); i += 2 {
		args := append(append([]string{}, full[:i]...), full[i+2:]...)
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("without %s: exit %d, want 2", full[i], code)
		}
		if !strings.Contains(errOut.String(), "missing required flag "+full[i]) {
			t.Errorf("without %s: %q", full[i], errOut.String())
		}
	}

	bad := map[string][]string{
		"not a hex SHA-256":        {"--client-fingerprint", "abc"},
		"the host must be an IP":   {"--listen", "localhost:1"},
		"missing port in address":  {"--listen", "10.0.0.5"},
		"want <name>=<docker":      {"--container", "app"},
		"given twice":              {"--container", "app=other"},
		"at least 1":               {"--max-sessions", "0"},
		"flag provided but not de": {"--bogus"},
		"unexpected argument":      {"extra"},
	}
	for want, extra := range bad {
		errOut.Reset()
		if code := run(context.Background(), append(append([]string{}, full...), extra...), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", extra, code, errOut.String(), want)
		}
	}

	// Several fingerprints, repeated containers, colons and capitals tolerated.
	cfg, err = parseFlags(append(append([]string{}, full...),
		"--client-fingerprint", fp+","+strings.ToUpper(strings.Repeat("cd:", 31))+"CD",
		"--container", "side=nebula-side", "--sandbox", "nebula-sandbox", "--docker", "podman",
		"--max-sessions", "2", "--idle-timeout", "5m", "--stream-creation-timeout", "3s"), &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.clientFingerprints) != 2 || hex.EncodeToString(cfg.clientFingerprints[1]) != strings.Repeat("cd", 32) ||
		len(cfg.containers) != 2 || cfg.sandbox != "nebula-sandbox" || cfg.docker != "podman" ||
		cfg.maxSessions != 2 || cfg.idleTimeout != 5*time.Minute || cfg.streamCreation != 3*time.Second {
		t.Errorf("parsed %+v", cfg)
	}

	out.Reset()
	if code := run(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
	for _, f := range []string{"--listen", "--state-dir", "--name", "--client-fingerprint", "--namespace",
		"--pod ", "--pod-uid", "--container", "--sandbox", "--docker", "--max-sessions", "--idle-timeout",
		"--stream-creation-timeout"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}
