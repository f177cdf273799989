package serve

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"airlock/internal/randid"
	"airlock/internal/safefile"
	"airlock/proxy"
)

var secretName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Secrets holds the appliance's secrets (from the secret store file) and
// each sandbox's task-scoped secrets and placeholders, in memory only.
// It implements proxy.Secrets. Values never leave it except toward the
// proxy's injection, and never appear in logs (see secretValue).
type Secrets struct {
	mu       sync.RWMutex
	global   map[string]string
	task     map[string]map[string]string // sandbox → name → value
	sentinel map[string][]proxy.Placeholder
}

var _ proxy.Secrets = (*Secrets)(nil)

// newSecrets returns an empty store.
func newSecrets() *Secrets {
	return &Secrets{global: map[string]string{}, task: map[string]map[string]string{}, sentinel: map[string][]proxy.Placeholder{}}
}

// loadSecrets reads the secret store file: "name=value" lines, '#'
// comments and blank lines allowed. The file must be mode 0600 or
// stricter; a looser file is refused (it holds credentials).
func loadSecrets(path string) (*Secrets, error) {
	s := newSecrets()
	if path == "" {
		return s, nil
	}
	b, err := safefile.ReadPrivate(path, MaxSecretsFile)
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	m, err := parseSecrets(path, b)
	if err != nil {
		return nil, err
	}
	s.global = m
	return s, nil
}

func parseSecrets(path string, b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || !secretName.MatchString(name) {
			// Never echo the line: it may hold a secret.
			return nil, fmt.Errorf("%s:%d: want name=value with a name of letters, digits, '_', '-', '.'", path, n)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s:%d: secret %q is defined twice", path, n, name)
		}
		out[name] = strings.TrimSpace(value)
	}
	return out, sc.Err()
}

// Names lists the store's secret names.
func (s *Secrets) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.global))
	for n := range s.global {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SetTask gives a sandbox its task-scoped secrets (they win over the
// store's) and makes placeholders for the sentinel names its policy uses.
// It returns the environment the sandbox gets: each sentinel's placeholder
// under the secret's name in upper case ("staging-token" →
// STAGING_TOKEN).
func (s *Secrets) SetTask(sandbox string, task map[string]string, sentinels []string) (map[string]string, error) {
	for n := range task {
		if !secretName.MatchString(n) {
			return nil, fmt.Errorf("secret name %q: use letters, digits, '_', '-', '.'", n)
		}
	}
	env := map[string]string{}
	var phs []proxy.Placeholder
	for _, n := range sentinels {
		ph := "airlock-placeholder-" + randid.Hex(12)
		phs = append(phs, proxy.Placeholder{Name: n, Value: ph})
		env[envName(n)] = ph
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(task) > 0 {
		cp := make(map[string]string, len(task))
		for k, v := range task {
			cp[k] = v
		}
		s.task[sandbox] = cp
	}
	if len(phs) > 0 {
		s.sentinel[sandbox] = phs
	}
	return env, nil
}

// Forget drops a sandbox's task secrets and placeholders.
func (s *Secrets) Forget(sandbox string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.task, sandbox)
	delete(s.sentinel, sandbox)
}

// Lookup returns the value of a secret for a sandbox (proxy.Secrets).
func (s *Secrets) Lookup(sandbox, name string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if v, ok := s.task[sandbox][name]; ok {
		return v, true
	}
	v, ok := s.global[name]
	return v, ok
}

// Placeholders returns the sentinels given to a sandbox (proxy.Secrets).
func (s *Secrets) Placeholders(sandbox string) []proxy.Placeholder {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sentinel[sandbox]
}

// TaskNames lists a sandbox's task secret names (never values).
func (s *Secrets) TaskNames(sandbox string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for n := range s.task[sandbox] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func envName(n string) string {
	b := []byte(strings.ToUpper(n))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// setPlaceholders records the sentinel placeholders (name → value) a
// sandbox was given in its environment.
func (s *Secrets) setPlaceholders(sandbox string, phs map[string]string) {
	if len(phs) == 0 {
		return
	}
	list := make([]proxy.Placeholder, 0, len(phs))
	for n, v := range phs {
		list = append(list, proxy.Placeholder{Name: n, Value: v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sentinel[sandbox] = list
}
