package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"airlock/client"
	"airlock/internal/safefile"
)

// maxPodsFile bounds the node's pod registry file (about 4096 pods).
const maxPodsFile = 4 << 20

// podStore is the node agent's registry of CNI attachments, kept in a file
// so a restarted agent knows its pods again (and reconciles them against
// the host's links and the plugin's GC).
type podStore struct {
	path string
	mu   sync.Mutex
	pods map[string]podRecord
}

// podRecord is one attachment as the registry file keeps it: what the API
// shows and what re-attaching after a restart needs.
type podRecord struct {
	client.Pod
	MAC     string `json:"mac,omitempty"`
	Gateway string `json:"gateway"`
	Num     uint32 `json:"num"`
}

func newPodStore(path string) *podStore {
	return &podStore{path: path, pods: map[string]podRecord{}}
}

// load reads the file; a missing file is an empty registry.
func (s *podStore) load() error {
	b, err := safefile.Read(s.path, maxPodsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod registry: %w", err)
	}
	var list []podRecord
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("pod registry %s: %w", s.path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range list {
		s.pods[p.ID] = p
	}
	return nil
}

func (s *podStore) get(id string) (podRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[id]
	return p, ok
}

func (s *podStore) list() []podRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]podRecord, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Created < out[j].Created || out[i].Created == out[j].Created && out[i].ID < out[j].ID
	})
	return out
}

func (s *podStore) put(p podRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[p.ID] = p
	return s.saveLocked()
}

func (s *podStore) remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[id]; !ok {
		return nil
	}
	delete(s.pods, id)
	return s.saveLocked()
}

// saveLocked writes the registry atomically (temporary file, rename).
func (s *podStore) saveLocked() error {
	list := make([]podRecord, 0, len(s.pods))
	for _, p := range s.pods {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("pod registry: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("pod registry: %w", err)
	}
	return nil
}

func podsFile(stateDir, instance string) string {
	return filepath.Join(stateDir, "pods-"+instance+".json")
}
