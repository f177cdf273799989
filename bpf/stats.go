package bpf

import (
	"errors"
	"fmt"
)

// Stats are one sandbox's counters, summed over CPUs. They count every
// packet, whether or not its drop event was reported.
type Stats struct {
	Passed           Passed
	Dropped          map[Reason]uint64 // only non-zero reasons
	EventsSuppressed uint64            // drops not reported because of the rate limit
	EventsLost       uint64            // drops not reported because the ring buffer was full
}

// Passed counts the packets that were let through, by where they went.
type Passed struct {
	ARP         uint64 // ARP for the gateway
	TCPProxy    uint64 // new TCP flows to the transparent listener
	TCPExplicit uint64 // new TCP flows to the explicit proxy listener
	TCPDNS      uint64 // TCP to the DNS port, to dnsd
	UDPDNS      uint64 // UDP to the DNS port, to dnsd
	TCPOwned    uint64 // packets of flows a proxy-side socket already owns
}

// TotalDropped sums Dropped.
func (s Stats) TotalDropped() uint64 {
	var n uint64
	for _, v := range s.Dropped {
		n += v
	}
	return n
}

// ErrNoStats is returned by Stats for an id outside 0..MaxSandboxes-1.
var ErrNoStats = errors.New("no counters for sandbox")

// Stats returns the counters of sandbox num (0: packets on interfaces with no
// configuration). A sandbox id's counters start at zero and keep counting
// across Detach and re-Attach; Reconcile zeroes those of removed sandboxes.
func (p *Path) Stats(num uint32) (Stats, error) {
	if num >= MaxSandboxes {
		return Stats{}, fmt.Errorf("bpf: sandbox %d: %w", num, ErrNoStats)
	}
	var per []steerSbxStats
	if err := p.objs.AlkStats.Lookup(num, &per); err != nil {
		return Stats{}, fmt.Errorf("bpf: read counters of sandbox %d: %w", num, err)
	}
	return sumStats(per), nil
}

func sumStats(per []steerSbxStats) Stats {
	s := Stats{Dropped: map[Reason]uint64{}}
	for _, c := range per {
		s.Passed.ARP += c.Passed[0]
		s.Passed.TCPProxy += c.Passed[1]
		s.Passed.TCPExplicit += c.Passed[2]
		s.Passed.TCPDNS += c.Passed[3]
		s.Passed.UDPDNS += c.Passed[4]
		s.Passed.TCPOwned += c.Passed[5]
		for r, v := range c.Dropped {
			if v != 0 {
				s.Dropped[Reason(r)] += v
			}
		}
		s.EventsSuppressed += c.EventsSuppressed
		s.EventsLost += c.EventsLost
	}
	return s
}
