package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"
)

// The integration test runs the agent as a process: this test binary, re-executed with this
// variable set, is nebula-agent (TestMain calls main).
const agentModeEnv = "NEBULA_AGENT_TEST_AS_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentModeEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const (
	testNamespace = "default"
	testPod       = "web"
	testPodUID    = "3f1c8f0e-1111-4222-8333-944445555666"
)

// podmanOrSkip skips unless podman is installed and we are root (setns needs it).
func podmanOrSkip(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("skipped: podman is not installed (the integration test runs real containers with it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: not root (podman containers and setns into their network namespace need root)")
	}
}

// busyboxImage is a busybox image present locally; none is pulled.
func busyboxImage(t *testing.T) string {
	t.Helper()
	for _, image := range []string{"docker.io/library/busybox:latest", "localhost/nebula-sim/busybox:latest"} {
		if exec.Command("podman", "image", "exists", image).Run() == nil {
			return image
		}
	}
	// Build one from the machine's static busybox.
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("skipped: no busybox image and no busybox binary to build one")
	}
	image := "localhost/nebula-agent-test/busybox:latest"
	script := fmt.Sprintf(`set -e; d=$(mktemp -d); trap 'rm -rf "$d"' EXIT; mkdir -p "$d/bin"; cp %q "$d/bin/busybox"
for a in $("$d/bin/busybox" --list); do ln -sf busybox "$d/bin/$a"; done
tar -C "$d" -c . | podman import --change 'ENV PATH=/bin' - %s`, bb, image)
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("building a busybox image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", image).Run() })
	return image
}

// containerLimits: --ulimit flags within this machine's hard limits (some sandboxes refuse the
// runtime's defaults).
func containerLimits() []string {
	var files, procs unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &files)
	_ = unix.Getrlimit(unix.RLIMIT_NPROC, &procs)
	n, u := files.Max, procs.Max
	if n == unix.RLIM_INFINITY || n == 0 {
		n = 1048576
	}
	if pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if m, err := strconv.ParseUint(strings.TrimSpace(string(pidMax)), 10, 64); err == nil && (u == unix.RLIM_INFINITY || u > m) {
			u = m
		}
	}
	if u > 65536 || u == 0 {
		u = 65536
	}
	return []string{"--ulimit", fmt.Sprintf("nofile=1024:%d", n), "--ulimit", fmt.Sprintf("nproc=%d:%d", u, u)}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runContainer starts a container (removed at cleanup) and returns its name.
func runContainer(t *testing.T, image string, flags []string, args ...string) string {
	t.Helper()
	name := "nebula-agent-test-" + randomSuffix()
	runArgs := append([]string{"run", "-d", "--name", name, "--network=none"}, containerLimits()...)
	runArgs = append(append(append(runArgs, flags...), image), args...)
	if out, err := exec.Command("podman", runArgs...).CombinedOutput(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("podman", "rm", "-f", "-t", "0", name).CombinedOutput(); err != nil {
			t.Errorf("podman rm %s: %v\n%s", name, err, out)
		}
		if exec.Command("podman", "container", "exists", name).Run() == nil {
			t.Errorf("container %s still exists", name)
		}
	})
	return name
}

// testAgent is a running nebula-agent process.
type testAgent struct {
	cmd         *exec.Cmd
	addr        string
	stateDir    string
	fingerprint string
	exited      chan struct{}
	exitErr     error

	mu    sync.Mutex
	lines []map[string]any // its JSON log lines
}

func (a *testAgent) logs() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.lines...)
}

// waitLog waits for a log line with msg whose fields include want.
func (a *testAgent) waitLog(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range a.logs() {
			if l["msg"] != msg {
				continue
			}
			ok := true
			for k, v := range want {
				if fmt.Sprint(l[k]) != fmt.Sprint(v) {
					ok = false
				}
			}
			if ok {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line %q with %v; lines: %v", msg, want, a.logs())
	return nil
}

// children: the agent's child processes (its docker CLI runs), as "pid cmdline".
func (a *testAgent) children() []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(a.cmd.Process.Pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		found = append(found, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '})))
	}
	return found
}

// waitNoChildren waits until the agent has no child process left.
func (a *testAgent) waitNoChildren(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := a.children()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent child processes still running after %v: %v", within, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit within 5 s.
func (a *testAgent) stop(t *testing.T) {
	t.Helper()
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Fatalf("agent still running 5 s after SIGTERM")
	}
	if a.exitErr != nil {
		t.Errorf("agent exit: %v", a.exitErr)
	}
}

// startAgent starts the agent (this binary in agent mode) on a free loopback port, trusting
// clientFP; it is stopped (SIGTERM, exit 0 expected) at cleanup.
func startAgent(t *testing.T, clientFP string, containers map[string]string, sandbox string, extra ...string) *testAgent {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := &testAgent{stateDir: t.TempDir(), exited: make(chan struct{})}
	args := []string{
		"--listen", "127.0.0.1:0", "--state-dir", a.stateDir, "--name", "i-test",
		"--client-fingerprint", clientFP, "--namespace", testNamespace, "--pod", testPod,
		"--pod-uid", testPodUID, "--docker", "podman",
	}
	for name, ctr := range containers {
		args = append(args, "--container", name+"="+ctr)
	}
	if sandbox != "" {
		args = append(args, "--sandbox", sandbox)
	}
	a.cmd = exec.Command(self, append(args, extra...)...)
	a.cmd.Env = append(os.Environ(), agentModeEnv+"=1")
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"msg": "(not JSON)", "text": sc.Text()}
			}
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "    agent: %s\n", sc.Text())
			}
			a.mu.Lock()
			a.lines = append(a.lines, line)
			a.mu.Unlock()
			if line["msg"] == "listening" {
				listening <- line
			}
		}
		a.exitErr = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.stop(t)
		if left := a.children(); len(left) > 0 {
			t.Errorf("processes left by the agent: %v", left)
		}
		for _, l := range a.logs() {
			if l["msg"] == "(not JSON)" {
				t.Errorf("agent wrote a line that is not JSON: %v", l["text"])
			}
		}
	})
	select {
	case line := <-listening:
		a.addr, _ = line["addr"].(string)
		a.fingerprint, _ = line["fingerprint"].(string)
	case <-a.exited:
		t.Fatalf("agent exited: %v; %v", a.exitErr, a.logs())
	case <-time.After(10 * time.Second):
		t.Fatalf("agent not listening after 10 s: %v", a.logs())
	}
	if fp, _ := os.ReadFile(filepath.Join(a.stateDir, fingerprintFile)); string(fp) != a.fingerprint {
		t.Fatalf("fingerprint file %q, logged %q", fp, a.fingerprint)
	}
	return a
}

// restConfig: client-go's config for the agent, with the client certificate, trusting exactly
// the agent's self-signed certificate (what the vnode's pinning amounts to).
func (a *testAgent) restConfig(t *testing.T, client tls.Certificate) *rest.Config {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(a.stateDir, certFile))
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(client.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{
		Host: "https://" + a.addr,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: client.Certificate[0]}),
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		},
	}
}

func (a *testAgent) httpClient(t *testing.T, client *tls.Certificate) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(a.stateDir, certFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: roots}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

func execURL(a *testAgent, kind, container string, cmd []string, query url.Values) string {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	for _, c := range cmd {
		q.Add("command", c)
	}
	return fmt.Sprintf("https://%s/%s/%s/%s/%s/%s?%s", a.addr, kind, testNamespace, testPod, testPodUID, container, q.Encode())
}

type executorKind struct {
	name string
	make func(cfg *rest.Config, u string) (remotecommand.Executor, error)
}

var executors = []executorKind{
	{"spdy", func(cfg *rest.Config, u string) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(cfg, "POST", mustParse(u))
	}},
	// The kubelet's WebSocket protocols end at v4.channel.k8s.io (v5 is spoken by kube-apiserver,
	// which translates it to SPDY toward the kubelet).
	{"websocket", func(cfg *rest.Config, u string) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", u, "v4.channel.k8s.io")
	}},
}

func mustParse(u string) *url.URL {
	p, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	return p
}

// sizeQueue hands client-go terminal sizes.
type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWithPodman drives the agent with client-go's own clients (what kube-apiserver uses toward
// a kubelet) against real podman containers.
func TestWithPodman(t *testing.T) {
	podmanOrSkip(t)
	image := busyboxImage(t)
	// "app": a web server on the loopback of its own network namespace, which is also the sandbox.
	app := runContainer(t, image, nil, "sh", "-c",
		"mkdir -p /www && echo hello-from-pod > /www/index.html && httpd -p 127.0.0.1:8080 -h /www && exec sleep 3600")
	// cat on its stdin, for attach (one per client: podman closes a container's stdin when an
	// attach ends, and cat exits then).
	containers := map[string]string{"app": app}
	for _, ex := range executors {
		containers["echo-"+ex.name] = runContainer(t, image, []string{"-i"}, "cat")
	}
	client, clientFP := newClientCert(t, "vnode")
	agent := startAgent(t, clientFP, containers, app)
	cfg := agent.restConfig(t, client)

	for _, ex := range executors {
		t.Run(ex.name+"/exit code", func(t *testing.T) {
			e, err := ex.make(cfg, execURL(agent, "exec", "app", []string{"sh", "-c", "echo out; echo err >&2; exit 7"},
				url.Values{"output": {"1"}, "error": {"1"}}))
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err = e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
			var exitErr utilexec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
				t.Fatalf("err %v (%T), want exit code 7", err, err)
			}
			if stdout.String() != "out\n" || stderr.String() != "err\n" {
				t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
			agent.waitLog(t, "session end", map[string]any{"kind": "exec", "exit_code": 7})
		})
		t.Run(ex.name+"/success", func(t *testing.T) {
			e, err := ex.make(cfg, execURL(agent, "exec", "app", []string{"cat", "/www/index.html"}, url.Values{"output": {"1"}}))
			if err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &stdout}); err != nil {
				t.Fatal(err)
			}
			if stdout.String() != "hello-from-pod\n" {
				t.Errorf("stdout %q", stdout.String())
			}
		})
	}

	t.Run("spdy/stdin", func(t *testing.T) {
		e, err := remotecommand.NewSPDYExecutor(cfg, "POST", mustParse(execURL(agent, "exec", "app", []string{"cat"},
			url.Values{"input": {"1"}, "output": {"1"}})))
		if err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		in := strings.Repeat("stdin goes through cat\n", 1000)
		if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: strings.NewReader(in), Stdout: &stdout}); err != nil {
			t.Fatal(err)
		}
		if stdout.String() != in {
			t.Errorf("got %d bytes back, want %d", stdout.Len(), len(in))
		}
	})

	for _, ex := range executors {
		t.Run(ex.name+"/tty size", func(t *testing.T) {
			e, err := ex.make(cfg, execURL(agent, "exec", "app", []string{"sh", "-c", "stty size; read line; stty size"},
				url.Values{"input": {"1"}, "output": {"1"}, "tty": {"1"}}))
			if err != nil {
				t.Fatal(err)
			}
			sizes := make(sizeQueue, 2)
			sizes <- remotecommand.TerminalSize{Width: 123, Height: 45}
			stdinR, stdinW := io.Pipe()
			var stdout syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- e.StreamWithContext(context.Background(), remotecommand.StreamOptions{
					Stdin: stdinR, Stdout: &stdout, Tty: true, TerminalSizeQueue: sizes,
				})
			}()
			waitFor(t, "the first size", 10*time.Second, func() bool { return strings.Contains(stdout.String(), "45 123") })
			sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
			time.Sleep(300 * time.Millisecond) // the resize travels: stream, pty, SIGWINCH, podman, container
			_, _ = stdinW.Write([]byte("\r"))
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("tty session did not end; output %q", stdout.String())
			}
			close(sizes)
			stdinW.Close()
			if !strings.Contains(stdout.String(), "45 123\r\n") || !strings.Contains(stdout.String(), "24 80\r\n") {
				t.Errorf("output %q: want the first size 45 123, then the resized 24 80", stdout.String())
			}
		})
	}

	t.Run("port-forward", func(t *testing.T) {
		transport, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		u := mustParse(fmt.Sprintf("https://%s/portForward/%s/%s/%s", agent.addr, testNamespace, testPod, testPodUID))
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
		stop, ready := make(chan struct{}), make(chan struct{})
		var out, errOut syncBuffer
		fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080", "0:8081"}, stop, ready, &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- fw.ForwardPorts() }()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("port-forward: %v", err)
		}
		ports, err := fw.GetPorts()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ { // several connections over one session
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", ports[0].Local))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello-from-pod\n" {
				t.Fatalf("GET through the forward: %d %q", resp.StatusCode, body)
			}
		}
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("ForwardPorts: %v", err)
		}
		end := agent.waitLog(t, "session end", map[string]any{"kind": "portForward"})
		if conns, _ := end["connections"].(map[string]any); fmt.Sprint(conns["8080"]) != "3" {
			t.Errorf("session end logged connections %v, want 3 to 8080", end["connections"])
		}

		// Nothing listens on 8081 in the Pod: the error goes back on the stream pair's error
		// stream, on which client-go ends the session ("lost connection to pod").
		stop, ready = make(chan struct{}), make(chan struct{})
		fw, err = portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8081"}, stop, ready, &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- fw.ForwardPorts() }()
		<-ready
		ports, _ = fw.GetPorts()
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local)); err == nil {
			_, _ = io.ReadAll(c)
			c.Close()
		}
		failed := agent.waitLog(t, "port-forward dial failed", map[string]any{"port": 8081})
		if !strings.Contains(fmt.Sprint(failed["error"]), "connection refused") {
			t.Errorf("dial error %v", failed["error"])
		}
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "lost connection") {
				t.Errorf("ForwardPorts after the refused port: %v", err)
			}
		case <-time.After(10 * time.Second):
			close(stop)
			t.Errorf("client-go did not end the session on the error; ForwardPorts: %v", <-done)
		}
	})

	t.Run("errors", func(t *testing.T) {
		hc := agent.httpClient(t, &client)
		check := func(method, target string, code int, body string) {
			t.Helper()
			req, _ := http.NewRequest(method, "https://"+agent.addr+target, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != code || !strings.Contains(string(b), body) {
				t.Errorf("%s %s: %d %q, want %d %q", method, target, resp.StatusCode, b, code, body)
			}
		}
		check("GET", "/healthz", 200, "ok")
		check("POST", "/exec/default/other/app?command=ls&output=1", 404, "pod does not exist")
		check("POST", "/exec/default/web/wrong-uid/app?command=ls&output=1", 404, "pod does not exist")
		check("POST", "/exec/default/web/sidecar?command=ls&output=1", 404, `container not found ("sidecar")`)
		check("GET", "/stats/summary", 404, "404 page not found")

		// A container that is not running: the kubelet-like message comes back as the status.
		if out, err := exec.Command("podman", "create", "--name", app+"-stopped", image, "true").CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		defer exec.Command("podman", "rm", "-f", app+"-stopped").Run()
		stopped := startAgent(t, clientFP, map[string]string{"down": app + "-stopped"}, "")
		e, err := remotecommand.NewSPDYExecutor(stopped.restConfig(t, client), "POST",
			mustParse(execURL(stopped, "exec", "down", []string{"true"}, url.Values{"output": {"1"}})))
		if err != nil {
			t.Fatal(err)
		}
		err = e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "container not running (down)") {
			t.Errorf("exec in a stopped container: %v", err)
		}
	})

	t.Run("pinning", func(t *testing.T) {
		// No client certificate, and another one: refused at the handshake.
		other, _ := newClientCert(t, "intruder")
		for name, cert := range map[string]*tls.Certificate{"no cert": nil, "other cert": &other} {
			resp, err := agent.httpClient(t, cert).Get("https://" + agent.addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s: got %d, want a refused handshake", name, resp.StatusCode)
			}
		}
		e, err := remotecommand.NewSPDYExecutor(agent.restConfig(t, other), "POST",
			mustParse(execURL(agent, "exec", "app", []string{"true"}, url.Values{"output": {"1"}})))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
			t.Error("exec with another client certificate succeeded")
		}
	})

	t.Run("stream closed kills the process", func(t *testing.T) {
		for _, tty := range []bool{false, true} {
			q := url.Values{"output": {"1"}, "input": {"1"}}
			if tty {
				q.Set("tty", "1")
			}
			marker := "3" + strconv.Itoa(int(time.Now().UnixNano()%100000))
			e, err := remotecommand.NewSPDYExecutor(cfg, "POST", mustParse(execURL(agent, "exec", "app",
				[]string{"sh", "-c", "echo started; exec sleep " + marker}, q)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			stdinR, stdinW := io.Pipe()
			var stdout syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Tty: tty})
			}()
			waitFor(t, "the command to start", 10*time.Second, func() bool { return strings.Contains(stdout.String(), "started") })
			if len(agent.children()) == 0 {
				t.Fatal("no podman exec process under the agent while the session runs")
			}
			cancel() // the client goes away
			<-done
			stdinW.Close()
			agent.waitNoChildren(t, 5*time.Second)
			agent.waitLog(t, "session end", map[string]any{"kind": "exec", "tty": tty, "command": "[sh -c echo started; exec sleep " + marker + "]"})
			// Inside the container: with a TTY, the runtime hangs up the terminal; without, a
			// command that does not read its stdin runs on (as with `docker exec`).
			out, _ := exec.Command("podman", "exec", app, "ps", "-o", "args").Output()
			inside := strings.Contains(string(out), "sleep "+marker)
			t.Logf("tty=%v: the in-container command still running after the session: %v", tty, inside)
			if inside {
				_ = exec.Command("podman", "exec", app, "pkill", "-f", "sleep "+marker).Run()
			}
		}
	})

	t.Run("attach", func(t *testing.T) {
		for _, ex := range executors {
			e, err := ex.make(cfg, execURL(agent, "attach", "echo-"+ex.name, nil, url.Values{"input": {"1"}, "output": {"1"}, "error": {"1"}}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			stdinR, stdinW := io.Pipe()
			var stdout syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Stderr: io.Discard})
			}()
			// The attach may not be in place when the first line is written: write until echoed.
			waitFor(t, ex.name+" attach echo", 10*time.Second, func() bool {
				_, _ = stdinW.Write([]byte("ping-" + ex.name + "\n"))
				time.Sleep(100 * time.Millisecond)
				return strings.Contains(stdout.String(), "ping-"+ex.name+"\n")
			})
			cancel()
			<-done
			stdinW.Close()
			agent.waitNoChildren(t, 5*time.Second)
			agent.waitLog(t, "session end", map[string]any{"kind": "attach", "container": "echo-" + ex.name})
		}
	})

	t.Run("max sessions", func(t *testing.T) {
		small := startAgent(t, clientFP, containers, app, "--max-sessions", "2")
		scfg := small.restConfig(t, client)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			e, err := remotecommand.NewSPDYExecutor(scfg, "POST", mustParse(execURL(small, "exec", "app",
				[]string{"sleep", "30"}, url.Values{"output": {"1"}})))
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
			}()
		}
		waitFor(t, "two sessions", 10*time.Second, func() bool {
			n := 0
			for _, l := range small.logs() {
				if l["msg"] == "session start" {
					n++
				}
			}
			return n == 2
		})
		e, err := remotecommand.NewSPDYExecutor(scfg, "POST", mustParse(execURL(small, "exec", "app",
			[]string{"true"}, url.Values{"output": {"1"}})))
		if err != nil {
			t.Fatal(err)
		}
		err = e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "too many sessions") {
			t.Errorf("third session: %v, want the 429's message", err)
		}
		resp, err := small.httpClient(t, &client).Post("https://"+small.addr+"/portForward/default/web", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("third session (plain POST): %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		cancel()
		wg.Wait()
		small.waitNoChildren(t, 5*time.Second)
		// The slots are free again.
		e, _ = remotecommand.NewSPDYExecutor(scfg, "POST", mustParse(execURL(small, "exec", "app",
			[]string{"true"}, url.Values{"output": {"1"}})))
		waitFor(t, "a free slot", 5*time.Second, func() bool {
			return e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard}) == nil
		})
	})

	t.Run("SIGTERM ends sessions", func(t *testing.T) {
		victim := startAgent(t, clientFP, containers, app)
		e, err := remotecommand.NewSPDYExecutor(victim.restConfig(t, client), "POST", mustParse(execURL(victim, "exec", "app",
			[]string{"sh", "-c", "echo started; sleep 30"}, url.Values{"output": {"1"}})))
		if err != nil {
			t.Fatal(err)
		}
		var stdout syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &stdout})
		}()
		waitFor(t, "the command to start", 10*time.Second, func() bool { return strings.Contains(stdout.String(), "started") })
		started := time.Now()
		victim.stop(t) // SIGTERM: exit 0 within 5 s
		t.Logf("stopped in %v", time.Since(started).Round(time.Millisecond))
		select {
		case err := <-done:
			if err == nil {
				t.Error("the session's client saw success")
			}
		case <-time.After(5 * time.Second):
			t.Error("the session's client still waits after the agent exited")
		}
		if left := victim.children(); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
}
