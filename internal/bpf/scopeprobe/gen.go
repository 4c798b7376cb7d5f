package scopeprobe

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type scope_record -type scope_link -type open_scope_key -type scope_kind -type probe_setting -type pid_filter_key -type fill_args -type counter -type cookie_bit -type setting_flag -type record_flag uprobe ../c/uprobe.bpf.c -- -I../c/include
