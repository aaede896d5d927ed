package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

const dialTimeout = 10 * time.Second

// PortForward copies between one forwarded connection's stream and the Pod's port
// (portforward.PortForwarder): 127.0.0.1:<port>, else [::1]:<port>, in the sandbox's network
// namespace (the host's without --sandbox). It returns once either side is done; the library
// writes a returned error to the stream pair's error stream.
func (s *session) PortForward(_ context.Context, _ string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	ctx := s.ctx // the library passes context.Background(): the session's ends with its connection
	s.mu.Lock()
	if s.ports == nil {
		s.ports = map[int32]int{}
	}
	s.ports[port]++
	s.mu.Unlock()

	if port <= 0 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	conn, err := s.dialPod(ctx, port)
	if err != nil {
		s.log.Warn("port-forward dial failed", "port", port, "error", err.Error())
		return err
	}
	defer conn.Close()

	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, stream)
		done <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	return err
}

func (s *session) dialPod(ctx context.Context, port int32) (net.Conn, error) {
	if s.agent.cfg.sandbox == "" {
		return dialLoopback(ctx, port)
	}
	out, err := exec.CommandContext(ctx, s.agent.cfg.docker, "inspect", "--format", "{{.State.Pid}}", s.agent.cfg.sandbox).Output()
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: inspect: %w", s.agent.cfg.sandbox, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("sandbox %s is not running", s.agent.cfg.sandbox)
	}
	return dialInNetns(ctx, fmt.Sprintf("/proc/%d/ns/net", pid), port)
}

func dialLoopback(ctx context.Context, port int32) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	p := strconv.Itoa(int(port))
	conn, err4 := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err4 == nil {
		return conn, nil
	}
	conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return conn, nil
	}
	return nil, fmt.Errorf("%v; %v", err4, err6)
}

// dialInNetns dials the loopback of the network namespace netnsPath from a thread that enters it
// and comes back (a socket stays in the namespace it was made in). If coming back fails, the
// thread stays locked, so the Go runtime ends it rather than reuse it.
func dialInNetns(ctx context.Context, netnsPath string, port int32) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, restored, err := dialFromNetns(ctx, netnsPath, port)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// dialFromNetns runs on a locked thread; restored says whether the thread is back in its own
// network namespace. A socket made in the Pod's namespace is good even if coming back failed.
func dialFromNetns(ctx context.Context, netnsPath string, port int32) (conn net.Conn, restored bool, err error) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, true, err
	}
	defer self.Close()
	target, err := os.Open(netnsPath)
	if err != nil {
		return nil, true, fmt.Errorf("sandbox network namespace: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("setns %s: %w", netnsPath, err)
	}
	conn, err = dialLoopback(ctx, port)
	return conn, unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil, err
}
