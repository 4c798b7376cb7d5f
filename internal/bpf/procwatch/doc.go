// Package procwatch reports process execs and exits from the
// sched_process_exec and sched_process_exit tracepoints, and executable file
// mappings from the BPF LSM hook mmap_file (or fentry on security_mmap_file
// where BPF LSM is not active), so discovery reacts to new processes and
// late libraries without polling /proc.
package procwatch
