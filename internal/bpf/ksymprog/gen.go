package ksymprog

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type ksym_request -type ksym_text -type ksym_args ksym ../c/ksym.bpf.c -- -I../c/include
