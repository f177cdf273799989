package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/safefile"
)

// ListenUnix opens the control socket at path: the directory is created
// 0755, a stale socket is removed (a live one is an error: another
// appliance is running), and the socket is chowned root:group, mode 0660.
// group "" leaves the group alone.
func ListenUnix(path, group string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket dir: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s is in use: is another airlock serve running?", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	// Create it with no access for others from the start, then widen.
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	l.SetUnlinkOnClose(true)
	if err := setSocketAccess(path, group); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func setSocketAccess(path, group string) error {
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return fmt.Errorf("control socket group %q: %w (create it with `groupadd --system %s`, or run make setup)", group, err, group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.Chown(path, os.Getuid(), gid); err != nil {
		return fmt.Errorf("control socket owner: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return fmt.Errorf("control socket mode: %w", err)
	}
	return nil
}

// peerContext is an http.Server ConnContext that records who is on the
// other end: the unix peer's user (SO_PEERCRED) or "token@ADDR" over TCP.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return WithPeer(ctx, "token@"+c.RemoteAddr().String())
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	name := strconv.Itoa(int(cred.Uid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	ctx = context.WithValue(ctx, keyPeerUID{}, cred.Uid)
	return WithPeer(ctx, fmt.Sprintf("%s (uid %d)", name, cred.Uid))
}

// ReadToken reads a bearer token file; it must be mode 0600 or stricter
// and hold at least 16 characters.
func ReadToken(path string) (string, error) {
	b, err := safefile.ReadPrivate(path, MaxTokenFile)
	if err != nil {
		return "", fmt.Errorf("control token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("control token %s is too short: use at least 16 random characters", path)
	}
	return tok, nil
}

// NewHTTPServer returns the control API's http.Server with timeouts that
// allow long exec streams but no slow headers.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       peerContext,
	}
}
