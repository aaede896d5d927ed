package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
)

// config is the agent's command line, checked.
type config struct {
	listen             string // <ip>:<port>
	listenIP           net.IP
	stateDir           string
	name               string
	clientFingerprints [][]byte // SHA-256 digests (32 bytes each)
	namespace          string
	pod                string
	podUID             string
	containers         map[string]string // Pod container name -> docker container name
	containerOrder     []string          // the names in the order given, for logs
	sandbox            string
	docker             string
	maxSessions        int
	idleTimeout        time.Duration
	streamCreation     time.Duration
}

// errHelp: --help was asked for (the usage went to stdout); exit 0.
var errHelp = errors.New("help requested")

// usageError is a command-line mistake: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// containerFlag collects repeated --container <name>=<docker container name>.
type containerFlag struct {
	names map[string]string
	order []string
}

func (c *containerFlag) String() string { return "" }

func (c *containerFlag) Set(v string) error {
	name, ctr, ok := strings.Cut(v, "=")
	if !ok || name == "" || ctr == "" {
		return fmt.Errorf("want <name>=<docker container name>, got %q", v)
	}
	if _, dup := c.names[name]; dup {
		return fmt.Errorf("container %q given twice", name)
	}
	if c.names == nil {
		c.names = map[string]string{}
	}
	c.names[name] = ctr
	c.order = append(c.order, name)
	return nil
}

// parseFlags reads the command line (without the program name). Usage and --help go to out,
// errors' explanations to errOut.
func parseFlags(args []string, out, errOut io.Writer) (*config, error) {
	fs := flag.NewFlagSet("nebula-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		c            config
		fingerprints string
		containers   containerFlag
	)
	fs.StringVar(&c.listen, "listen", "", "where to serve mutual TLS, `ip:port` (the instance's private address); required")
	fs.StringVar(&c.stateDir, "state-dir", "", "`dir`ectory for cert.pem, key.pem and fingerprint (created on first start, reused after); required")
	fs.StringVar(&c.name, "name", "", "the instance's `id`: the server certificate's common name; required")
	fs.StringVar(&fingerprints, "client-fingerprint", "", "lowercase `hex` SHA-256 of the DER of the client certificate allowed to connect; several separated by commas; required")
	fs.StringVar(&c.namespace, "namespace", "", "the `namespace` of the one Pod this host runs; required")
	fs.StringVar(&c.pod, "pod", "", "that Pod's `name`; required")
	fs.StringVar(&c.podUID, "pod-uid", "", "that Pod's `uid`; required")
	fs.Var(&containers, "container", "a container of the Pod and its docker container, `name=docker-name`; repeat for each, at least one")
	fs.StringVar(&c.sandbox, "sandbox", "", "docker `container` whose network namespace port-forward dials into; without it, the host's own loopback (hostNetwork Pods)")
	fs.StringVar(&c.docker, "docker", "docker", "`path` of the docker CLI (podman works too)")
	fs.IntVar(&c.maxSessions, "max-sessions", 64, "concurrent exec, attach and port-forward sessions; one more is answered 429 (the virtual node caps a Pod's sessions first: kubeletApi.maxStreamSessionsPerPod)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 4*time.Hour, "close a streaming connection idle this long (the kubelet's streamingConnectionIdleTimeout)")
	fs.DurationVar(&c.streamCreation, "stream-creation-timeout", remotecommandconsts.DefaultStreamCreationTimeout, "how long a client has to open a session's streams")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, out)
			return nil, errHelp
		}
		fmt.Fprintf(errOut, "nebula-agent: %v\n", err)
		fmt.Fprintln(errOut, "Run 'nebula-agent --help' for the flags.")
		return nil, usageError{err.Error()}
	}
	fail := func(format string, a ...any) (*config, error) {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintf(errOut, "nebula-agent: %s\n", msg)
		fmt.Fprintln(errOut, "Run 'nebula-agent --help' for the flags.")
		return nil, usageError{msg}
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	for _, req := range []struct{ flag, value string }{
		{"listen", c.listen}, {"state-dir", c.stateDir}, {"name", c.name},
		{"client-fingerprint", fingerprints}, {"namespace", c.namespace}, {"pod", c.pod},
		{"pod-uid", c.podUID},
	} {
		if req.value == "" {
			return fail("missing required flag --%s", req.flag)
		}
	}
	if len(containers.order) == 0 {
		return fail("missing required flag --container (at least one <name>=<docker container name>)")
	}
	c.containers, c.containerOrder = containers.names, containers.order

	host, _, err := net.SplitHostPort(c.listen)
	if err != nil {
		return fail("--listen %q: %v", c.listen, err)
	}
	if c.listenIP = net.ParseIP(host); c.listenIP == nil {
		return fail("--listen %q: the host must be an IP address", c.listen)
	}
	for _, f := range strings.Split(fingerprints, ",") {
		f = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(f), ":", ""))
		sum, err := hex.DecodeString(f)
		if err != nil || len(sum) != 32 {
			return fail("--client-fingerprint: %q is not a hex SHA-256 (64 hex digits)", f)
		}
		c.clientFingerprints = append(c.clientFingerprints, sum)
	}
	if c.maxSessions < 1 {
		return fail("--max-sessions must be at least 1")
	}
	if c.idleTimeout <= 0 || c.streamCreation <= 0 {
		return fail("--idle-timeout and --stream-creation-timeout must be positive")
	}
	return &c, nil
}

func printUsage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, `Usage: nebula-agent --listen <ip>:<port> --state-dir <dir> --name <instance id>
         --client-fingerprint <hex>[,<hex>...] --namespace <ns> --pod <name> --pod-uid <uid>
         --container <name>=<docker container> [--container ...] [--sandbox <docker container>]

Serves the kubelet's exec, attach and port-forward API for the one Pod of this host, over
mutual TLS with a pinned client certificate.

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(out, "%s\n    \t%s", line, usage)
		if f.DefValue != "" && f.DefValue != "0" {
			fmt.Fprintf(out, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(out)
	})
}
