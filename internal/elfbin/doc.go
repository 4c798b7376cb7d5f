// Package elfbin reads ELF binaries the same way everywhere: a file mapped
// read-only (Open, Map) and read under the guard that turns a fault, a
// file truncated while read, into an error (Guard, GuardFaults,
// Recovered); the mapping between file offsets and virtual addresses
// (AddressMapper: a sampled PC's address, a mapping's load bias, where
// code lies in the file); build ids (ReadBuildIDs, NoteBuildIDs); whether
// the Go toolchain built it (IsGo); compressed sections (SectionData,
// SectionReader).
//
// Files come from processes other users control: every read is bounded,
// and a malformed file gives an error or nothing, never a crash.
package elfbin
