package profiler

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64 -type sample -type scope_link -type counter -type sample_flag -type unwind_row -type unwind_mapping -type unwind_proc -type unwind_file -type unwind_file_key -type unwind_file_state -type unwind_mapping_kind -type unwind_proc_flag -type notice -type notice_kind -type notice_flag -type interp_frame -type interp_frame_kind -type interp_frame_flag -type interp_stop -type py_proc -type py_tstate_via -type py_frame_layout -type hs_proc -type hs_heap profiler ../c/profiler.bpf.c -- -I../c/include
