package process

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	// Start and End bound the mapping in the process's address space.
	Start, End uint64
	// Offset is the file offset the mapping starts at.
	Offset uint64
	// Perms is the permission string, such as "r-xp".
	Perms string
	// Dev is the device of the mapped file, encoded like st_dev; Inode its
	// inode. Together they identify the file whatever its path.
	Dev, Inode uint64
	// Path is the mapped file's path as the process sees it (" (deleted)"
	// removed), or a pseudo-path such as "[vdso]", or empty.
	Path string
	// Deleted is set when the file was deleted after being mapped.
	Deleted bool
}

// Executable reports whether the mapping is executable.
func (m *Mapping) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a regular file.
func (m *Mapping) File() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// Contains reports whether addr falls inside the mapping.
func (m *Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// FileOffset converts an address inside the mapping to an offset in the file.
func (m *Mapping) FileOffset(addr uint64) uint64 { return addr - m.Start + m.Offset }

// ParseMappings parses the text of /proc/PID/maps.
func ParseMappings(r io.Reader) ([]Mapping, error) {
	var maps []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		m, err := parseMapsLine(sc.Bytes())
		if err != nil {
			return nil, err
		}
		maps = append(maps, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading maps: %w", err)
	}
	return maps, nil
}

// parseMapsLine parses "start-end perms offset major:minor inode   path".
func parseMapsLine(line []byte) (Mapping, error) {
	var m Mapping
	fields := bytes.Fields(line)
	if len(fields) < 5 {
		return m, fmt.Errorf("parsing maps line %q: too few fields", line)
	}
	start, end, ok := bytes.Cut(fields[0], []byte("-"))
	if !ok {
		return m, fmt.Errorf("parsing maps line %q: bad range", line)
	}
	var err error
	hex := func(b []byte) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(string(b), 16, 64)
		return v
	}
	m.Start, m.End = hex(start), hex(end)
	m.Perms = string(fields[1])
	m.Offset = hex(fields[2])
	major, minor, ok := bytes.Cut(fields[3], []byte(":"))
	if !ok {
		return m, fmt.Errorf("parsing maps line %q: bad device", line)
	}
	m.Dev = mkdev(uint32(hex(major)), uint32(hex(minor)))
	if err != nil {
		return m, fmt.Errorf("parsing maps line %q: %w", line, err)
	}
	if m.Inode, err = strconv.ParseUint(string(fields[4]), 10, 64); err != nil {
		return m, fmt.Errorf("parsing maps line %q: %w", line, err)
	}
	if len(fields) > 5 {
		// The path is everything after the inode, spaces included.
		idx := bytes.Index(line, fields[5])
		path := string(line[idx:])
		if p, ok := strings.CutSuffix(path, " (deleted)"); ok {
			path, m.Deleted = p, true
		}
		m.Path = path
	}
	return m, nil
}

// mkdev encodes a device number the way the kernel's new_encode_dev (and so
// st_dev from stat) does.
func mkdev(major, minor uint32) uint64 {
	return uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12 | uint64(major&^0xfff)<<32
}
