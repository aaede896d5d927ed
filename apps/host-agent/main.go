// Command nebula-agent serves the kubelet's exec, attach and port-forward API for the one Pod of
// a Nebula host, over mutual TLS, with the kubelet's own streaming libraries. See README.md.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the agent until ctx ends; it returns the exit status: 0 after a clean shutdown, 1 on a
// failure, 2 on a command-line mistake.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	klog.SetSlogLogger(log.With("from", "k8s")) // the streaming libraries' own messages, as JSON too

	cert, created, err := loadOrCreateServerCert(cfg.stateDir, cfg.name, cfg.listenIP)
	if err != nil {
		log.Error("server certificate", "state_dir", cfg.stateDir, "error", err.Error())
		return 1
	}
	a := newAgent(cfg, log)
	err = a.serve(ctx, serverTLSConfig(cert, cfg.clientFingerprints), func(addr net.Addr) {
		log.Info("listening",
			"addr", addr.String(),
			"name", cfg.name,
			"pod", cfg.namespace+"/"+cfg.pod,
			"pod_uid", cfg.podUID,
			"containers", cfg.containers,
			"sandbox", cfg.sandbox,
			"fingerprint", fingerprint(cert.Certificate[0]),
			"cert_created", created,
			"max_sessions", cfg.maxSessions)
	})
	if err != nil {
		log.Error("serve", "error", err.Error())
		return 1
	}
	log.Info("stopped")
	return 0
}
