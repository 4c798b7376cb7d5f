package procwatch

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type proc_event -type proc_event_kind -type proc_event_flag -type counter procevents ../c/procevents.bpf.c -- -I../c/include
