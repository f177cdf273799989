// Package cdptest drives headless Chromium over the DevTools protocol for
// tests (a copy of serve/cdp_test.go's driver, exported, with extra
// command-line flags).
package cdptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// cdp drives headless Chromium over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on fd 3, replies on fd 4, each a JSON
// message ended by a NUL), so a test can wait for what the page does after
// it loaded (server-sent events) instead of dumping the DOM at load.
type CDP struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File
	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpReply
	session string
	stderr  bytes.Buffer
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Start runs Chromium with a page of width x height and extra flags.
func Start(t *testing.T, width, height int, extra ...string) *CDP {
	t.Helper()
	cmdIn, toChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChrome, cmdOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--remote-debugging-pipe", fmt.Sprintf("--window-size=%d,%d", width, height)}
	args = append(append(args, extra...), "about:blank")
	c := &CDP{t: t, in: toChrome, waiting: map[int]chan cdpReply{}}
	c.cmd = exec.Command("/usr/bin/chromium", args...)
	c.cmd.ExtraFiles = []*os.File{cmdIn, cmdOut} // fd 3, fd 4
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmdIn.Close()
	cmdOut.Close()
	t.Cleanup(func() {
		toChrome.Close()
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
		fromChrome.Close()
	})
	go c.read(fromChrome)
	var tg struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	c.call("", "Target.getTargets", nil, &tg)
	var page string
	for _, ti := range tg.TargetInfos {
		if ti.Type == "page" {
			page = ti.TargetID
		}
	}
	if page == "" {
		t.Fatalf("chromium has no page target: %+v", tg)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	c.call("", "Target.attachToTarget", map[string]any{"targetId": page, "flatten": true}, &att)
	c.session = att.SessionID
	return c
}

func (c *CDP) read(r *os.File) {
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			c.mu.Lock()
			for id, ch := range c.waiting {
				close(ch)
				delete(c.waiting, id)
			}
			c.mu.Unlock()
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue // an event
		}
		c.mu.Lock()
		ch := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// call sends one command (to the page's session unless session is "")
// and decodes its result into out.
func (c *CDP) call(session, method string, params any, out any) {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan cdpReply, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	if _, err := c.in.Write(append(b, 0)); err != nil {
		c.t.Fatalf("cdp %s: %v", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			c.t.Fatalf("cdp %s: chromium went away\n%s", method, c.stderr.String())
		}
		if r.Error != nil {
			c.t.Fatalf("cdp %s: %s", method, r.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				c.t.Fatalf("cdp %s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		c.t.Fatalf("cdp %s: no answer", method)
	}
}

// Navigate opens url in the page.
func (c *CDP) Navigate(url string) {
	c.call(c.session, "Page.navigate", map[string]any{"url": url}, nil)
}

// Eval returns the string value of a JavaScript expression in the page.
func (c *CDP) Eval(expr string) string {
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	c.call(c.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	s, _ := r.Result.Value.(string)
	return s
}

// WaitFor polls a JavaScript condition until it is true or d passes.
func (c *CDP) WaitFor(ctx context.Context, cond string) bool {
	for ctx.Err() == nil {
		if c.Eval("String(Boolean("+cond+"))") == "true" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Screenshot writes a PNG of the page to path.
func (c *CDP) Screenshot(path string) {
	var r struct {
		Data string `json:"data"`
	}
	c.call(c.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r)
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		c.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
}
