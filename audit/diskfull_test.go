package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a small tmpfs (root only) and unmounts it in cleanup.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (a disk that can fill up)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for range 1 << 14 {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the tmpfs never filled")
}

func TestDiskFullReportsDropsAndResumes(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, QueueSize: 256, BatchSize: 64,
		EnqueueWait: time.Millisecond, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond})
	e := New(KindDNS, "sb-1")
	e.DNS = &DNS{QName: "a.example.test", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1"}}
	p.Emit(e)
	flush(t, p)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	const n = 20000
	start := time.Now()
	for range n {
		p.Emit(e) // each returns within EnqueueWait, disk full or not
	}
	t.Logf("%d emits on a full disk took %v", n, time.Since(start))
	st := p.Stats()
	if st.StoreErrors+st.StreamErrors == 0 || !st.Failing || st.Dropped == 0 {
		t.Fatalf("a full disk went unnoticed: %+v", st)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	flush(t, p)
	p.Emit(e) // after the gap
	flush(t, p)
	st = p.Stats()
	if st.Failing || st.Lost != 0 || st.Accepted+st.Dropped != n+2 {
		t.Fatalf("did not resume cleanly: %+v", st)
	}
	ctx := context.Background()
	dns, _ := p.Store().Query(ctx, Query{Kind: KindDNS})
	gaps, _ := p.Store().Query(ctx, Query{Kind: KindGap})
	var dropped uint64
	for _, g := range gaps {
		dropped += g.Gap.Dropped
	}
	if uint64(len(dns)) != st.Accepted || dropped != st.Dropped {
		t.Errorf("store holds %d dns and gaps for %d dropped; stats %+v", len(dns), dropped, st)
	}
	p.Close()
	res, err := Verify(stream)
	if err != nil || !res.OK() || res.Records != int(st.Written) {
		t.Fatalf("stream after a full disk: %+v %v", res, err)
	}
}
