package dnsd

// Keys of dnsd's log lines (slog), named once.
const (
	logSandbox  = "sandbox"
	logClient   = "client"
	logQName    = "qname"
	logQType    = "qtype"
	logRCode    = "rcode"
	logVerdict  = "verdict"
	logRule     = "rule"
	logCategory = "category"
	logGuard    = "guard"
	logUpstream = "upstream"
	logCacheHit = "cache_hit"
	logLatency  = "latency_us"
	logStripped = "stripped"
	logErr      = "err"
)
