// Package pprofexporter writes profiles as gzipped pprof files to a local
// directory, one file per export plus an always-current latest.pb.gz, so a
// flame graph needs no backend: `go tool pprof -http=:8080 latest.pb.gz`.
//
//go:generate mdatagen metadata.yaml
package pprofexporter // import "github.com/bpfcol/bpfcol/exporter/pprofexporter"
