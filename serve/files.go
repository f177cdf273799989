package serve

// Caps on the files the appliance reads (docs/config.md). Each is read
// only if it is a regular file (internal/safefile): a FIFO, a device or a
// socket is refused by name instead of hanging or exhausting serve.
const (
	MaxConfigFile  = 1 << 20  // config (airlock.toml)
	MaxSecretsFile = 1 << 20  // secrets.file
	MaxTokenFile   = 4 << 10  // control.token_file
	MaxCAFile      = 16 << 20 // each of upstream.ca_files
)
