// Package process reads what bpfcol needs to know about a process from
// /proc: its memory mappings, executable, threads and container.
//
// It is the one home of file identity (FileKey: device and inode, as maps
// shows them; FileID: with size and mtime, as stat shows them), of opening
// and stat-ing a mapped file from our mount namespace in the process's own
// root (OpenMapping, StatMapping, MappedFilePath, OpenInRoot), of the
// bounded per-pid process information cache (InfoCache), and of the bounded
// snapshots of processes' mappings, with their files held open, that
// outlive the processes (Snapshots): read from /proc (Take), or recorded
// from what the sampler read in BPF (Record), its files named once per
// file and containers once per cgroup.
package process
