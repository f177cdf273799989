package bpf

// The objects are generated with Debian's clang-14 and committed, so `go build`
// needs no clang; `make generate` rebuilds them and `make generate-check`
// (bpf/generate-check.sh) proves the committed files are current.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -type sbx_config -type sbx_stats -type drop_event steer c/steer.c -- -O2 -g -Wall -Werror -Ic/include
