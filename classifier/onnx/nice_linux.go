package onnx

import "syscall"

// setThreadNice sets the calling thread's nice value (Linux schedules
// threads, and setpriority with a thread id reaches one). Raising it needs
// no privilege; the caller keeps its thread locked so that the value stays
// with the work it was set for.
func setThreadNice(n int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), n)
}
