package main

import (
	"bufio"
	"bytes"
	"io"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
	"k8s.io/kubelet/pkg/cri/streaming/remotecommand"
)

// Why a session's context ended.
var (
	errClientGone  = errors.New("the client's connection closed")
	errShutdown    = errors.New("the agent is shutting down")
	errSessionDone = errors.New("session over")
)

// agent serves the streaming API of one Pod.
type agent struct {
	cfg *config
	log *slog.Logger

	slots    chan struct{}   // one per running session
	sessions sync.WaitGroup  // running sessions
	nextID   atomic.Uint64   // session ids, for the logs
	stopping context.Context // cancelled on shutdown: ends every session
	stop     context.CancelFunc

	mu    sync.Mutex
	conns map[*trackedConn]struct{} // open connections, hijacked ones included
}

func newAgent(cfg *config, log *slog.Logger) *agent {
	stopping, stop := context.WithCancel(context.Background())
	return &agent{
		cfg:      cfg,
		log:      log,
		slots:    make(chan struct{}, cfg.maxSessions),
		stopping: stopping,
		stop:     stop,
		conns:    map[*trackedConn]struct{}{},
	}
}

func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
		return
	}
	rt, ok := parseRoute(r.URL.EscapedPath())
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodPost) {
		http.NotFound(w, r)
		return
	}
	var (
		streamOpts *remotecommand.Options
		pfOpts     *portforward.V4Options
		err        error
	)
	if rt.kind == "portForward" {
		pfOpts, err = portforward.NewV4Options(r)
	} else {
		streamOpts, err = remotecommand.NewOptions(r)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rt.namespace != a.cfg.namespace || rt.pod != a.cfg.pod || (rt.uid != "" && rt.uid != a.cfg.podUID) {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	ctr := ""
	if rt.kind != "portForward" {
		if ctr, ok = a.cfg.containers[rt.container]; !ok {
			http.Error(w, fmt.Sprintf("container not found (%q)", rt.container), http.StatusNotFound)
			return
		}
	}
	select {
	case a.slots <- struct{}{}:
	default:
		// No "key: value" shape: client-go reads such a body as YAML of a Status, losing the text.
		http.Error(w, fmt.Sprintf("too many sessions (at most %d at once)", a.cfg.maxSessions), http.StatusTooManyRequests)
		return
	}
	a.sessions.Add(1)
	defer func() {
		<-a.slots
		a.sessions.Done()
	}()

	// The session's context ends with its connection (see watchedWriter), or on shutdown.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(errSessionDone)
	defer context.AfterFunc(a.stopping, func() { cancel(errShutdown) })()
	r = r.WithContext(ctx)
	w = &watchedWriter{ResponseWriter: w, cancel: func() { cancel(errClientGone) }}

	s := &session{
		agent:   a,
		id:      a.nextID.Add(1),
		kind:    rt.kind,
		started: time.Now(),
	}
	attrs := []any{"session", s.id, "kind", rt.kind, "remote", r.RemoteAddr, "client", clientPrefix(r.TLS)}
	switch rt.kind {
	case "exec":
		cmd := r.URL.Query()[corev1.ExecCommandParam]
		attrs = append(attrs, "container", rt.container, "command", cmd, "tty", streamOpts.TTY, "stdin", streamOpts.Stdin)
	case "attach":
		attrs = append(attrs, "container", rt.container, "tty", streamOpts.TTY, "stdin", streamOpts.Stdin)
	case "portForward":
		if len(pfOpts.Ports) > 0 {
			attrs = append(attrs, "ports", pfOpts.Ports)
		}
	}
	s.log = a.log.With(attrs...)
	s.log.Info("session start")

	idle, creation := a.cfg.idleTimeout, a.cfg.streamCreation
	switch rt.kind {
	case "exec":
		cmd := r.URL.Query()[corev1.ExecCommandParam]
		remotecommand.ServeExec(w, r, s, a.cfg.pod, "", ctr, cmd, streamOpts, idle, creation,
			remotecommandconsts.SupportedStreamingProtocols)
	case "attach":
		remotecommand.ServeAttach(w, r, s, a.cfg.pod, "", ctr, streamOpts, idle, creation,
			remotecommandconsts.SupportedStreamingProtocols)
	case "portForward":
		s.ctx = ctx
		portforward.ServePortForward(w, r, s, a.cfg.pod, "", pfOpts, idle, creation,
			portforward.SupportedProtocols)
	}
	s.end()
}

// clientPrefix is the first 16 hex digits of the client certificate's fingerprint.
func clientPrefix(state *tls.ConnectionState) string {
	if state == nil || len(state.PeerCertificates) == 0 {
		return ""
	}
	return fingerprint(state.PeerCertificates[0].Raw)[:16]
}

// session is one exec, attach or port-forward request: it runs the docker CLI for the first two
// (runtime.go) and dials the Pod's ports for the last (portforward.go).
type session struct {
	agent   *agent
	id      uint64
	kind    string
	started time.Time
	log     *slog.Logger
	ctx     context.Context // port-forward: the library passes context.Background()

	mu       sync.Mutex
	ran      bool // the docker command ran (exec, attach)
	exitCode int
	err      error
	ports    map[int32]int // port-forward: connections per port
}

func (s *session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs := []any{"duration", time.Since(s.started).Round(time.Millisecond).String()}
	if s.ran {
		attrs = append(attrs, "exit_code", s.exitCode)
	}
	if s.err != nil {
		attrs = append(attrs, "error", s.err.Error())
	}
	if s.ports != nil {
		forwarded := map[string]int{}
		for p, n := range s.ports {
			forwarded[strconv.Itoa(int(p))] = n
		}
		attrs = append(attrs, "connections", forwarded)
	}
	s.log.Info("session end", attrs...)
}

// serve listens on cfg.listen until ctx ends, then ends every session (killing their docker
// processes) and returns within about 4 s. ready, when not nil, gets the bound address.
func (a *agent) serve(ctx context.Context, tlsConfig *tls.Config, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", a.cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           a,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		// HTTP/1.1 only: SPDY and WebSocket upgrades hijack the connection.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(&trackingListener{Listener: ln, agent: a}, tlsConfig)) }()

	select {
	case err := <-errc:
		a.stop()
		return err
	case <-ctx.Done():
	}
	a.log.Info("shutting down", "sessions", len(a.slots))
	deadline := time.Now().Add(4 * time.Second)
	shutdownCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Stop accepting; idle keep-alive connections close.
	go func() { _ = srv.Shutdown(shutdownCtx) }()
	// Kill the sessions' processes: each then writes its status and closes its connection.
	a.stop()
	if !waitTimeout(&a.sessions, time.Second) {
		a.closeConns() // the rest (port-forwards, clients that do not read)
		if !waitTimeout(&a.sessions, time.Until(deadline)) {
			a.log.Warn("sessions still running at exit", "sessions", len(a.slots))
		}
	}
	_ = srv.Close()
	return nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (a *agent) closeConns() {
	a.mu.Lock()
	conns := make([]*trackedConn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// trackingListener hands out trackedConns and registers them with the agent, which closes
// them all on shutdown (net/http forgets the connections it hands over to a streaming upgrade).
type trackingListener struct {
	net.Listener
	agent *agent
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, agent: l.agent}
	l.agent.mu.Lock()
	l.agent.conns[tc] = struct{}{}
	l.agent.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	agent *agent
}

func (c *trackedConn) Close() error {
	c.agent.mu.Lock()
	delete(c.agent.conns, c)
	c.agent.mu.Unlock()
	return c.Conn.Close()
}

// watchedWriter hands the streaming library a hijacked connection that cancels the session once
// the peer is gone: a read fails (EOF, reset, TLS close_notify; not a deadline) or the
// connection is closed. net/http does not watch a hijacked connection, and the library runs the
// command with the request's context: this is what ends a command whose client went away.
type watchedWriter struct {
	http.ResponseWriter
	cancel context.CancelFunc
}

func (w *watchedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &watchedConn{Conn: conn, cancel: w.cancel}
	// Bytes the server read ahead first, then the connection itself, through wc.
	buffered, _ := rw.Reader.Peek(rw.Reader.Buffered())
	r := io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), wc)
	return wc, bufio.NewReadWriter(bufio.NewReader(r), bufio.NewWriter(wc)), nil
}

type watchedConn struct {
	net.Conn
	cancel context.CancelFunc
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			c.cancel()
		}
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.cancel()
	return c.Conn.Close()
}
