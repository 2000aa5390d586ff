// Process control: the drain child and the `outbox relay` daemons, started with posix_spawn and
// reaped with wait4, so each one's peak RSS (ru_maxrss) is its own.
#pragma once

#include "run.hpp"

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace bench {

// A child process: the relay as its own process, so its peak RSS is its own (wait4's ru_maxrss).
struct Proc {
    pid_t pid = -1;
    int out = -1; // read end of its stdout (or stderr) pipe, or -1
};

// Starts args[0] with the environment of this process. stdout: a pipe when pipe_fd == 1, else
// /dev/null; stderr: a pipe when pipe_fd == 2, else appended to err_file (inherited when empty).
Proc spawn_proc(const std::vector<std::string> &args, int pipe_fd, const std::string &err_file);
std::string read_all(int fd);

struct ProcExit {
    int status = -1; // exit code, or 128 + signal
    long maxrss_kib = 0;
};

ProcExit reap(Proc &p);

// `outbox relay` daemons of this run (X, L, H). Stopped with SIGTERM (the relay finishes its batch).
struct Daemon {
    std::string name;
    Proc proc;
    std::string log;
    std::thread reader;              // X: reads its log lines from a pipe
    std::atomic<long> published{0};  // X: sum of "published N" over its batch log lines
    std::atomic<int64_t> last_ns{0}; // X: steady-clock time of the last such line
    std::string tail;                // X: its last log lines, for error messages
};

// Starts a relay daemon whose log (warnings and errors) goes to a file (listed in run.daemon_logs).
std::unique_ptr<Daemon> start_daemon(Run &run, const std::string &name, const std::vector<std::string> &extra);
// Starts a relay daemon logging every batch at info level into a pipe that a thread reads, summing
// what it published: drain timing without querying the table while it drains.
std::unique_ptr<Daemon> start_counting_daemon(const Run &run, const std::string &name,
                                              const std::vector<std::string> &extra);
ProcExit stop_daemon(Daemon &d);
// True while the process runs (a zombie is not reaped here: reap() still gets its status).
bool daemon_alive(const Daemon &d);
// die()s with the end of the daemon's log when it has exited.
void require_alive(const Daemon &d);

} // namespace bench
