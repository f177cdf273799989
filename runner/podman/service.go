package podman

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// containersConf is the sandbox user's containers.conf: runc (crun refuses
// hybrid cgroup hosts), cgroupfs and file events (no systemd user session),
// and a short exit_command_delay (otherwise each exec leaves two conmon
// processes for 300 s). runner/images/build.sh installs the same file.
//
//go:embed containers.conf
var containersConf []byte

// ServiceConfig says whose Podman service to use.
type ServiceConfig struct {
	User string // default "airlock-sandbox"
	// Socket is the service's unix socket; default the user's standard
	// /run/user/UID/podman/podman.sock. Tests use a private one so they
	// never stop a service someone else is using.
	Socket string
	Logger *slog.Logger // nil: discard
	// IdleTimeout makes a service this process starts exit after that long
	// without clients; 0: it runs until stopped.
	IdleTimeout time.Duration
}

// Service is the sandbox user's `podman system service`.
type Service struct {
	socket string
	cmd    *exec.Cmd // nil when the service was already running
	done   chan struct{}
}

// Socket is the service's unix socket path.
func (s *Service) Socket() string { return s.socket }

// Started reports whether this process started the service.
func (s *Service) Started() bool { return s.cmd != nil }

// StartService makes sure the sandbox user's Podman service answers on its
// socket, starting it (as that user, with containersConf) if it does not.
func StartService(ctx context.Context, cfg ServiceConfig) (*Service, error) {
	if cfg.User == "" {
		cfg.User = "airlock-sandbox"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u, err := user.Lookup(cfg.User)
	if err != nil {
		return nil, fmt.Errorf("podman service: sandbox user: %w (run 'make setup')", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	runDir := filepath.Join("/run/user", u.Uid)
	s := &Service{socket: cfg.Socket}
	if s.socket == "" {
		s.socket = filepath.Join(runDir, "podman", "podman.sock")
	}
	if err := prepareUser(u.HomeDir, runDir, uid, gid); err != nil {
		return nil, fmt.Errorf("podman service: %w", err)
	}
	if answers(s.socket) {
		return s, nil
	}
	if err := recoverState(ctx, u, runDir, uid, gid, log); err != nil {
		return nil, err
	}
	if err := s.start(u, runDir, uid, gid, cfg.IdleTimeout); err != nil {
		return nil, err
	}
	log.Info("podman service started", "user", cfg.User, "socket", s.socket, "pid", s.cmd.Process.Pid)
	return s, s.wait(ctx)
}

// prepareUser creates the runtime dir and installs containers.conf.
func prepareUser(home, runDir string, uid, gid int) error {
	for _, d := range []string{runDir, filepath.Join(runDir, "podman")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	dir := filepath.Join(home, ".config", "containers")
	for _, d := range []string{filepath.Join(home, ".config"), dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	conf := filepath.Join(dir, "containers.conf")
	if old, err := os.ReadFile(conf); err == nil && string(old) == string(containersConf) {
		return nil
	}
	if err := os.WriteFile(conf, containersConf, 0o644); err != nil {
		return err
	}
	return os.Chown(conf, uid, gid)
}

func (s *Service) start(u *user.User, runDir string, uid, gid int, idle time.Duration) error {
	logf, err := os.OpenFile(filepath.Join(runDir, "airlock-podman-service.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("podman service: log: %w", err)
	}
	defer logf.Close()
	cmd := userPodman(context.Background(), u, runDir, uid, gid, "system", "service", "--time="+strconv.Itoa(int(idle.Seconds())), "unix://"+s.socket)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("podman service: start: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	return nil
}

// userPodman is podman run as the sandbox user, with only the environment
// it needs (never this process's).
func userPodman(ctx context.Context, u *user.User, runDir string, uid, gid int, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Dir = u.HomeDir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir, "USER=" + u.Username,
		"LOGNAME=" + u.Username, "XDG_RUNTIME_DIR=" + runDir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	return cmd
}

// staleState reports whether podman's output is its "invalid internal
// status" error: the state lists running containers, but neither the pause
// process that holds the user namespace nor any of their conmons is alive
// (a host that killed the user's processes). Podman's own reset for that
// state is `podman system migrate`.
func staleState(out []byte) bool {
	return bytes.Contains(out, []byte("invalid internal status")) && bytes.Contains(out, []byte("system migrate"))
}

// recoverState checks that rootless podman can enter the sandbox user's
// namespace and, when it cannot because of a stale state, runs podman's
// `system migrate` once. Any other failure is returned with podman's words.
func recoverState(ctx context.Context, u *user.User, runDir string, uid, gid int, log *slog.Logger) error {
	probe := func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return userPodman(ctx, u, runDir, uid, gid, "unshare", "true").CombinedOutput()
	}
	out, err := probe()
	if err == nil {
		return nil
	}
	if bytes.Contains(out, []byte("database configuration mismatch")) {
		return fmt.Errorf("podman as %s: its storage was made with another driver (%s): run 'make image' (runner/images/build.sh), which migrates it", u.Username, lastLine(out))
	}
	if !staleState(out) {
		return fmt.Errorf("podman as %s does not work: %w: %s", u.Username, err, lastLine(out))
	}
	log.Warn("podman state is stale (its pause process is gone); running podman system migrate", "user", u.Username)
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if mout, merr := userPodman(mctx, u, runDir, uid, gid, "system", "migrate").CombinedOutput(); merr != nil {
		return fmt.Errorf("podman system migrate as %s: %w: %s", u.Username, merr, lastLine(mout))
	}
	if out, err = probe(); err != nil {
		return fmt.Errorf("podman as %s still does not work after system migrate: %w: %s", u.Username, err, lastLine(out))
	}
	return nil
}

// lastLine is the last non-empty line of a command's output.
func lastLine(out []byte) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return string(lines[len(lines)-1])
}

// wait waits until the socket answers or the service exits.
func (s *Service) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !answers(s.socket) {
		select {
		case <-s.done:
			return fmt.Errorf("podman service exited at start; see %s", filepath.Join(filepath.Dir(filepath.Dir(s.socket)), "airlock-podman-service.log"))
		case <-ctx.Done():
			_ = s.Close()
			return fmt.Errorf("podman service: socket %s: %w", s.socket, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func answers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Close stops the service if this process started it (by its PID), and
// waits for it to exit.
func (s *Service) Close() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return nil
}
