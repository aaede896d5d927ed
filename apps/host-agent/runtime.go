package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"
)

const (
	// How long a TTY session waits for the client's first terminal size before it starts the
	// command (kubectl sends it right after opening the streams).
	firstSizeWait = time.Second
	// How long, after the docker CLI exits, its output may still be draining.
	outputDrain = 2 * time.Second
)

// ExecInContainer runs `docker exec` (remotecommand.Executor). containerID is the docker
// container's name.
func (s *session) ExecInContainer(ctx context.Context, _ string, _ types.UID, containerID string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if len(cmd) == 0 {
		return s.fail(errors.New("no command given"))
	}
	if err := s.checkRunning(ctx, containerID); err != nil {
		return s.fail(err)
	}
	args := []string{"exec"}
	if in != nil {
		args = append(args, "-i")
	}
	if tty {
		args = append(args, "-t")
	}
	args = append(append(args, containerID), cmd...)
	code, err := s.run(ctx, args, in, true, out, errOut, tty, resize)
	if err != nil {
		return s.fail(err)
	}
	if code != 0 {
		return utilexec.CodeExitError{
			Err:  fmt.Errorf("command %q exited with %d", cmd, code),
			Code: code,
		}
	}
	return nil
}

// AttachContainer runs `docker attach` (remotecommand.Attacher).
func (s *session) AttachContainer(ctx context.Context, _ string, _ types.UID, containerID string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if err := s.checkRunning(ctx, containerID); err != nil {
		return s.fail(err)
	}
	args := []string{"attach", "--sig-proxy=false"}
	if in == nil {
		args = append(args, "--no-stdin")
	}
	args = append(args, containerID)
	// The end of the client's stdin is not passed on: the docker CLI would close the container's
	// stdin, which outlives an attach (as a CRI runtime's does, unless the Pod sets stdinOnce).
	code, err := s.run(ctx, args, in, false, out, errOut, tty, resize)
	if err != nil {
		return s.fail(err)
	}
	// `docker attach` exits with the container's code when the container ends, which for the
	// kubelet is the attach's normal end. Another non-zero exit while it still runs: a failure.
	if code != 0 && ctx.Err() == nil && s.checkRunning(ctx, containerID) == nil {
		return s.fail(fmt.Errorf("%s attach exited with %d", s.agent.cfg.docker, code))
	}
	return nil
}

func (s *session) fail(err error) error {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	return err
}

// checkRunning: `docker inspect` says the container is running.
func (s *session) checkRunning(ctx context.Context, containerID string) error {
	out, err := exec.CommandContext(ctx, s.agent.cfg.docker, "inspect", "--format", "{{.State.Running}}", containerID).Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		return fmt.Errorf("container not running (%s)", s.containerName(containerID))
	}
	return nil
}

// containerName is the Pod's name for a docker container.
func (s *session) containerName(containerID string) string {
	for name, ctr := range s.agent.cfg.containers {
		if ctr == containerID {
			return name
		}
	}
	return containerID
}

// run runs the docker CLI with args, wired to the session's streams (a pseudo-terminal between
// them with tty), and returns its exit code. The process runs in its own process group, killed
// when ctx ends. closeStdin: the end of in closes the CLI's stdin (without tty).
func (s *session) run(ctx context.Context, args []string, in io.Reader, closeStdin bool, out, errOut io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize) (int, error) {
	cmd := exec.CommandContext(ctx, s.agent.cfg.docker, args...)
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = outputDrain
	var stderr bytes.Buffer // the CLI's own complaints, when stderr is not streamed
	var err error
	if tty {
		err = s.runTTY(ctx, cmd, in, out, resize)
	} else {
		err = s.runPipes(cmd, in, closeStdin, out, errOut, &stderr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		s.ran, s.exitCode = true, 0
		return 0, nil
	case errors.As(err, &exitErr) && exitErr.Exited():
		s.ran, s.exitCode = true, exitErr.ExitCode()
		return exitErr.ExitCode(), nil
	case ctx.Err() != nil:
		return -1, fmt.Errorf("killed: %w", context.Cause(ctx))
	default:
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return -1, err
	}
}

func (s *session) runPipes(cmd *exec.Cmd, in io.Reader, closeStdin bool, out, errOut io.Writer, stderr *bytes.Buffer) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out != nil {
		cmd.Stdout = out
	}
	cmd.Stderr = stderr
	if errOut != nil {
		cmd.Stderr = errOut
	}
	var stdin io.WriteCloser
	if in != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if in != nil {
		// Not waited for: a client that keeps stdin open must not hold the session once the
		// command is done (the library closes the connection then, which ends this copy).
		go func() {
			_, _ = io.Copy(stdin, in)
			if closeStdin {
				_ = stdin.Close()
			} // else Wait closes it
		}()
	}
	return cmd.Wait()
}

// runTTY starts cmd on a new pseudo-terminal: the docker CLI's terminal, which it puts in raw
// mode and whose size it forwards to the container's (at start and on SIGWINCH).
func (s *session) runTTY(ctx context.Context, cmd *exec.Cmd, in io.Reader, out io.Writer,
	resize <-chan remotecommand.TerminalSize) error {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return err
	}
	defer ptmx.Close()
	if err := makeRaw(tty); err != nil {
		tty.Close()
		return err
	}
	if resize != nil {
		// The first size before the start, so that the container's terminal starts with it.
		select {
		case size, ok := <-resize:
			if ok {
				setSize(ptmx, size)
			} else {
				resize = nil
			}
		case <-time.After(firstSizeWait):
		case <-ctx.Done():
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	tty.Close()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	if resize != nil {
		go func() {
			for {
				select {
				case size, ok := <-resize:
					if !ok {
						return
					}
					setSize(ptmx, size)
				case <-done:
					return
				}
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	if out == nil {
		out = io.Discard
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, ptmx) // ends with EIO once the CLI (the terminal's last user) is gone
		close(copied)
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(outputDrain):
	}
	return err
}

func setSize(ptmx *os.File, size remotecommand.TerminalSize) {
	_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
}

// makeRaw sets a terminal to raw mode (as cfmakeraw(3)): this terminal is only a transport, the
// container's own terminal does the echo, line editing and signals.
func makeRaw(f *os.File) error {
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
}
