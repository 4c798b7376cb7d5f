package symbolize

// FileKey identifies a binary by device and inode, never by path: paths
// differ between mount namespaces and can be replaced while a process runs.
type FileKey struct{ Dev, Ino uint64 }
