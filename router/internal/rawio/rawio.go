// Package rawio makes a TCP connection's reads and writes raw system
// calls inside the runtime's poller.
//
// Go's net package makes every read and write on a socket through
// syscall.Syscall, which tells the scheduler the thread may block
// (entersyscall, exitsyscall). A socket the poller owns is non-blocking,
// so neither call ever blocks; but while a thread is "in a system call"
// the runtime's monitor (sysmon) may hand its P to another thread, and as
// long as it keeps finding threads in system calls it wakes every 20 µs.
// Made raw (syscall.RawSyscall inside syscall.RawConn.Read/Write), a read
// or write is a plain call: the poller still waits for readiness and
// keeps deadlines and Close, and the monitor backs off to its idle pace.
//
// A build with the race detector keeps Go's own calls (Wrap returns the
// TCPConn): the detector learns from them that what is written to a
// socket happens before it is read.
package rawio
