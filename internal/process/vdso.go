package process

// VDSOPath is the pseudo-path /proc/PID/maps gives the kernel's vDSO.
const VDSOPath = "[vdso]"
