//go:build ignore

// steer.c: the TCX ingress program on the host end of every sandbox veth.
//
// Every frame the sandbox sends ends in exactly one of three places:
//   - dnsd's sockets (UDP or TCP to the DNS port, any destination address),
//   - the proxy's transparent listener (any other TCP, any address and port),
//     with the original destination kept (bpf_sk_assign, no NAT),
//   - dropped, counted per sandbox and reported through a rate-limited ring
//     buffer.
// ARP requests for the gateway (and replies to it) are the only frames that
// pass without a socket. A packet on an interface with no configuration is
// dropped: the program fails closed.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Debian 12's uapi headers predate TCX; these are the classic TC verdicts,
// which TCX maps to TCX_PASS (ends the chain) and TCX_DROP.
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

#define ETH_P_IP 0x0800
#define ETH_P_ARP 0x0806
#define ETH_P_IPV6 0x86DD
#define PROTO_ICMP 1
#define PROTO_TCP 6
#define PROTO_UDP 17

// Slots of alk_sockets (keep in sync with sockets.go).
#define SLOT_PROXY 0
#define SLOT_DNS_UDP 1
#define SLOT_DNS_TCP 2
#define SLOT_EXPLICIT 3
#define SLOT_MAX 4

// Drop reasons (keep in sync with events.go).
enum drop_reason {
	R_NONE = 0,
	R_NO_CONFIG,
	R_VLAN,
	R_MALFORMED,
	R_ETHERTYPE,
	R_SPOOFED_MAC,
	R_ARP,
	R_IPV6,
	R_IP_OPTIONS,
	R_FRAGMENT,
	R_SPOOFED_SRC,
	R_UDP,
	R_ICMP,
	R_PROTOCOL,
	R_NO_PROXY,
	R_NO_DNS,
	R_ASSIGN,
	R_MAX,
};

// Packets that passed (keep in sync with stats.go).
enum pass_kind {
	P_ARP = 0,
	P_TCP_PROXY,
	P_TCP_EXPLICIT,
	P_TCP_DNS,
	P_UDP_DNS,
	P_TCP_OWNED,
	P_MAX,
};

// Per-interface configuration, written by Attach. Sizes are part of the pin
// ABI: change them only together with the pin version in path.go.
struct sbx_config {
	__u32 ifindex; // the host-side interface this entry is for
	__u32 sandbox; // numeric sandbox id, the index of alk_stats
	__be32 addr; // the sandbox's only IPv4 address
	__be32 gateway; // the host end's address
	__u16 dns_port; // host order; UDP/TCP to this port goes to dnsd
	__u16 proxy_port; // host order; TCP to gateway:proxy_port goes to the explicit slot
	__u8 mac[6]; // the sandbox's MAC
	__u8 check_mac; // 1: frames must carry mac as source
	__u8 pad;
	char name[48]; // the sandbox's name, for userspace only
};

// Per-CPU counters of one sandbox, plus that CPU's event budget window.
struct sbx_stats {
	__u64 passed[P_MAX];
	__u64 dropped[R_MAX];
	__u64 events_suppressed; // drops counted but not reported (rate limit)
	__u64 events_lost; // drops whose event did not fit in the ring buffer
	__u64 window_start; // coarse ns: start of this CPU's event window
	__u64 window_events; // events this CPU reported in the window
};

struct drop_event {
	__u64 ts_ns;
	__u32 sandbox;
	__u32 ifindex;
	__u16 ethertype; // host order
	__u16 sport; // host order
	__u16 dport; // host order
	__u8 proto; // IP protocol (or IPv6 next header)
	__u8 reason; // enum drop_reason
	__u8 family; // 4, 6, or 0 when there is no IP header
	__u8 pad[7];
	__u8 src[16];
	__u8 dst[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); // ifindex
	__type(value, struct sbx_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alk_config SEC(".maps");

// The fast path: a copy of the entry at ifindex % FAST_SLOTS (an inlined
// array lookup) when no other live interface holds that slot; alk_config is
// consulted when the slot's ifindex differs.
#define FAST_SLOTS 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FAST_SLOTS);
	__type(key, __u32);
	__type(value, struct sbx_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alk_fastcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, SLOT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alk_sockets SEC(".maps");

// Indexed by sandbox id (0: interfaces without configuration). An array
// lookup is inlined by the verifier: the hot path pays no hash.
#define MAX_SANDBOXES 4096
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct sbx_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alk_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} alk_events SEC(".maps");

// Load-time settings (spec.Variables).
volatile const __u32 steer_mark = 0x10000000;
volatile const __u32 event_budget = 64; // events per sandbox per CPU per window
volatile const __u64 event_window_ns = 100000000; // 100 ms

// Force BTF for the types userspace reads.
const struct drop_event *unused_drop_event __attribute__((unused));

struct ethhdr_t {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
} __attribute__((packed));

struct arphdr_t {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[6];
	__u8 spa[4];
	__u8 tha[6];
	__u8 tpa[4];
} __attribute__((packed));

struct iphdr_t {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6hdr_t {
	__be32 vtcfl;
	__be16 plen;
	__u8 nexthdr;
	__u8 hlim;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct l4ports {
	__be16 sport;
	__be16 dport;
};

// What the program learned about the packet so far; kept small because it
// is initialised for every packet. The drop event is built only when one is
// reported.
struct pkt {
	const struct sbx_config *cfg;
	struct sbx_stats *st;
	__u32 ifindex;
	__u32 sandbox;
	__be32 src4; // IPv4 or ARP sender
	__be32 dst4; // IPv4 or ARP target
	__u16 ethertype; // host order
	__u16 sport; // host order
	__u16 dport; // host order
	__u8 proto;
	__u8 family;
};

// allow_event spends this CPU's budget (per-CPU data: no atomics needed).
static __always_inline int allow_event(struct sbx_stats *st, __u64 now)
{
	if (now - st->window_start > event_window_ns) {
		st->window_start = now;
		st->window_events = 0;
	}
	if (st->window_events >= event_budget)
		return 0;
	st->window_events++;
	return 1;
}

static __always_inline int drop6(struct pkt *p, __u8 reason, const struct ipv6hdr_t *ip6)
{
	if (reason < R_MAX)
		p->st->dropped[reason]++;
	__u64 now = bpf_ktime_get_coarse_ns();
	if (!allow_event(p->st, now)) {
		p->st->events_suppressed++;
		return TC_ACT_SHOT;
	}
	struct drop_event *ev = bpf_ringbuf_reserve(&alk_events, sizeof(*ev), 0);
	if (!ev) {
		p->st->events_lost++;
		return TC_ACT_SHOT;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->ts_ns = now;
	ev->sandbox = p->sandbox;
	ev->ifindex = p->ifindex;
	ev->ethertype = p->ethertype;
	ev->sport = p->sport;
	ev->dport = p->dport;
	ev->proto = p->proto;
	ev->reason = reason;
	ev->family = p->family;
	if (ip6) {
		__builtin_memcpy(ev->src, ip6->saddr, 16);
		__builtin_memcpy(ev->dst, ip6->daddr, 16);
	} else {
		__builtin_memcpy(ev->src, &p->src4, 4);
		__builtin_memcpy(ev->dst, &p->dst4, 4);
	}
	bpf_ringbuf_submit(ev, 0);
	return TC_ACT_SHOT;
}

static __always_inline int drop(struct pkt *p, __u8 reason)
{
	return drop6(p, reason, 0);
}

static __always_inline int pass(struct __sk_buff *skb, struct pkt *p, int kind)
{
	if (kind < P_MAX)
		p->st->passed[kind]++;
	skb->mark = steer_mark;
	return TC_ACT_OK;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] &&
	       a[5] == b[5];
}

// assign hands skb to the socket in slot (or the fallback slot when it is
// empty) and drops when neither holds one: fail closed.
static __always_inline int assign_slot(struct __sk_buff *skb, struct pkt *p, __u32 slot,
				       __u32 fallback, int kind, __u8 missing)
{
	struct bpf_sock *sk = bpf_map_lookup_elem(&alk_sockets, &slot);
	if (!sk && fallback != slot) {
		sk = bpf_map_lookup_elem(&alk_sockets, &fallback);
		kind = P_TCP_PROXY;
	}
	if (!sk)
		return drop(p, missing);
	long err = bpf_sk_assign(skb, sk, 0);
	bpf_sk_release(sk);
	if (err)
		return drop(p, R_ASSIGN);
	return pass(skb, p, kind);
}

static __always_inline int do_tcp(struct __sk_buff *skb, struct pkt *p, struct iphdr_t *ip,
				  struct l4ports *ports)
{
	struct bpf_sock_tuple t; // only the 12 bytes of t.ipv4 are passed and read
	t.ipv4.saddr = ip->saddr;
	t.ipv4.daddr = ip->daddr;
	t.ipv4.sport = ports->sport;
	t.ipv4.dport = ports->dport;

	// A flow a proxy-side socket already owns (request, established,
	// TIME_WAIT) stays with it. A host listener is never a target.
	struct bpf_sock *sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		if (sk->state != BPF_TCP_LISTEN) {
			long err = bpf_sk_assign(skb, sk, 0);
			bpf_sk_release(sk);
			if (err)
				return drop(p, R_ASSIGN);
			return pass(skb, p, P_TCP_OWNED);
		}
		bpf_sk_release(sk);
	}

	__u16 dport = p->dport;
	if (dport == p->cfg->dns_port)
		return assign_slot(skb, p, SLOT_DNS_TCP, SLOT_DNS_TCP, P_TCP_DNS, R_NO_DNS);
	if (p->cfg->proxy_port && dport == p->cfg->proxy_port && ip->daddr == p->cfg->gateway)
		return assign_slot(skb, p, SLOT_EXPLICIT, SLOT_PROXY, P_TCP_EXPLICIT, R_NO_PROXY);
	return assign_slot(skb, p, SLOT_PROXY, SLOT_PROXY, P_TCP_PROXY, R_NO_PROXY);
}

static __always_inline int do_ipv4(struct __sk_buff *skb, struct pkt *p, void *l3, void *end)
{
	struct iphdr_t *ip = l3;
	if ((void *)(ip + 1) > end)
		return drop(p, R_MALFORMED);
	p->family = 4;
	p->proto = ip->protocol;
	p->src4 = ip->saddr;
	p->dst4 = ip->daddr;
	if ((ip->ver_ihl >> 4) != 4)
		return drop(p, R_MALFORMED);
	if (ip->ver_ihl != 0x45)
		return drop(p, R_IP_OPTIONS);
	if (ip->frag_off & bpf_htons(0x3fff))
		return drop(p, R_FRAGMENT);
	if (ip->saddr != p->cfg->addr)
		return drop(p, R_SPOOFED_SRC);

	void *l4 = ip + 1;
	if (ip->protocol == PROTO_ICMP) {
		if (l4 + 2 <= end)
			p->dport = ((__u8 *)l4)[0]; // the ICMP type
		return drop(p, R_ICMP);
	}
	if (ip->protocol != PROTO_TCP && ip->protocol != PROTO_UDP)
		return drop(p, R_PROTOCOL);

	struct l4ports *ports = l4;
	if ((void *)(ports + 1) > end)
		return drop(p, R_MALFORMED);
	p->sport = bpf_ntohs(ports->sport);
	p->dport = bpf_ntohs(ports->dport);

	if (ip->protocol == PROTO_TCP) {
		if (l4 + 20 > end)
			return drop(p, R_MALFORMED);
		return do_tcp(skb, p, ip, ports);
	}
	if (l4 + 8 > end)
		return drop(p, R_MALFORMED);
	if (p->dport != p->cfg->dns_port)
		return drop(p, R_UDP);
	return assign_slot(skb, p, SLOT_DNS_UDP, SLOT_DNS_UDP, P_UDP_DNS, R_NO_DNS);
}

static __always_inline int do_arp(struct __sk_buff *skb, struct pkt *p, void *l3, void *end)
{
	struct arphdr_t *a = l3;
	if ((void *)(a + 1) > end)
		return drop(p, R_MALFORMED);
	__be32 spa, tpa;
	__builtin_memcpy(&spa, a->spa, 4);
	__builtin_memcpy(&tpa, a->tpa, 4);
	p->src4 = spa;
	p->dst4 = tpa;
	p->dport = bpf_ntohs(a->op);
	if (a->htype != bpf_htons(1) || a->ptype != bpf_htons(ETH_P_IP) || a->hlen != 6 ||
	    a->plen != 4)
		return drop(p, R_ARP);
	if (spa != p->cfg->addr)
		return drop(p, R_SPOOFED_SRC);
	if (p->cfg->check_mac && !mac_eq(a->sha, p->cfg->mac))
		return drop(p, R_SPOOFED_MAC);
	if (tpa != p->cfg->gateway)
		return drop(p, R_ARP);
	if (a->op != bpf_htons(1) && a->op != bpf_htons(2))
		return drop(p, R_ARP);
	// ARP is not steered: no mark, just pass.
	p->st->passed[P_ARP]++;
	return TC_ACT_OK;
}

static __always_inline int do_ipv6(struct pkt *p, void *l3, void *end)
{
	struct ipv6hdr_t *ip6 = l3;
	if ((void *)(ip6 + 1) > end)
		return drop(p, R_IPV6);
	p->family = 6;
	p->proto = ip6->nexthdr;
	return drop6(p, R_IPV6, ip6);
}

#define PULL_LEN 54 // Ethernet + IPv4 + TCP without options

SEC("tc")
int alk_steer(struct __sk_buff *skb)
{
	struct pkt p = {};
	__u32 ifindex = skb->ifindex;
	__u32 slot = ifindex % FAST_SLOTS;
	p.cfg = bpf_map_lookup_elem(&alk_fastcfg, &slot);
	if (!p.cfg || p.cfg->ifindex != ifindex)
		p.cfg = bpf_map_lookup_elem(&alk_config, &ifindex);
	p.ifindex = ifindex;
	p.sandbox = p.cfg ? p.cfg->sandbox : 0;
	p.st = bpf_map_lookup_elem(&alk_stats, &p.sandbox);
	if (!p.st)
		return TC_ACT_SHOT;
	if (!p.cfg)
		return drop(&p, R_NO_CONFIG);
	if (skb->vlan_present)
		return drop(&p, R_VLAN);

	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + PULL_LEN > end && skb->len > end - data) {
		bpf_skb_pull_data(skb, skb->len < PULL_LEN ? skb->len : PULL_LEN);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}

	struct ethhdr_t *eth = data;
	if ((void *)(eth + 1) > end)
		return drop(&p, R_MALFORMED);
	p.ethertype = bpf_ntohs(eth->proto);
	if (p.cfg->check_mac && !mac_eq(eth->src, p.cfg->mac))
		return drop(&p, R_SPOOFED_MAC);

	switch (eth->proto) {
	case bpf_htons(ETH_P_IP):
		return do_ipv4(skb, &p, eth + 1, end);
	case bpf_htons(ETH_P_ARP):
		return do_arp(skb, &p, eth + 1, end);
	case bpf_htons(ETH_P_IPV6):
		return do_ipv6(&p, eth + 1, end);
	}
	return drop(&p, R_ETHERTYPE);
}

// alk_empty is the baseline for the cost benchmark.
SEC("tc")
int alk_empty(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

char __license[] SEC("license") = "GPL";
