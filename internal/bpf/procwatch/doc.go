// Package procwatch reports process execs and exits from the
// sched_process_exec and sched_process_exit tracepoints, so discovery reacts
// to new processes without polling /proc.
package procwatch
