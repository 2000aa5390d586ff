#include "proc.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>

extern "C" char **environ;

namespace bench {

namespace {

std::vector<std::string> relay_daemon_args(const Run &run, const std::string &name,
                                           const std::vector<std::string> &extra) {
    std::vector<std::string> a = {run.outbox_cli, "relay",
                                  "--schema",     run.schema,
                                  "--set",        "amqp.exchange=" + run.exchange,
                                  "--set",        "relay.notify_channel=" + run.channel,
                                  "--set",        "relay.name=" + name};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// The reader thread of a counting daemon: sums "published N" over its batch log lines, keeps the
// time of the last one and the other lines' tail.
void count_batches(Daemon *dp) {
    std::string buf;
    char chunk[8192];
    while (true) {
        const ssize_t n = read(dp->proc.out, chunk, sizeof chunk);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            break;
        }
        buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            const std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            const size_t at = line.find(", published ");
            if (line.find("batch: read") != std::string::npos && at != std::string::npos) {
                dp->published.fetch_add(std::atol(line.c_str() + at + 12));
                dp->last_ns.store(now_ns());
            } else {
                dp->tail += line + "\n";
                if (dp->tail.size() > 4000) {
                    dp->tail.erase(0, dp->tail.size() - 4000);
                }
            }
        }
    }
}

std::string file_tail(const std::string &path) {
    std::ifstream f(path);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

} // namespace

Proc spawn_proc(const std::vector<std::string> &args, int pipe_fd, const std::string &err_file) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int p[2] = {-1, -1};
    if (pipe_fd == 1 || pipe_fd == 2) {
        if (pipe2(p, O_CLOEXEC) != 0) {
            die(std::string("pipe: ") + std::strerror(errno));
        }
        posix_spawn_file_actions_adddup2(&fa, p[1], pipe_fd);
    }
    if (pipe_fd != 1) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    }
    if (pipe_fd != 2 && !err_file.empty()) {
        posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    }
    std::vector<char *> argv;
    argv.reserve(args.size() + 1);
    for (const auto &a : args) {
        argv.push_back(const_cast<char *>(a.c_str()));
    }
    argv.push_back(nullptr);
    Proc pr;
    const int rc = posix_spawn(&pr.pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (p[1] >= 0) {
        close(p[1]);
    }
    if (rc != 0) {
        if (p[0] >= 0) {
            close(p[0]);
        }
        die("cannot start " + args[0] + ": " + std::strerror(rc));
    }
    pr.out = p[0];
    return pr;
}

std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    while (true) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            out.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    return out;
}

ProcExit reap(Proc &p) {
    ProcExit e;
    if (p.pid <= 0) {
        return e;
    }
    int st = 0;
    rusage ru{};
    while (wait4(p.pid, &st, 0, &ru) < 0 && errno == EINTR) {
    }
    e.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    e.maxrss_kib = ru.ru_maxrss;
    if (p.out >= 0) {
        close(p.out);
        p.out = -1;
    }
    p.pid = -1;
    return e;
}

std::unique_ptr<Daemon> start_daemon(Run &run, const std::string &name, const std::vector<std::string> &extra) {
    auto d = std::make_unique<Daemon>();
    d->name = name;
    d->log = run.log_prefix + name + ".log";
    run.daemon_logs.push_back(d->log);
    std::vector<std::string> args = relay_daemon_args(run, name, extra);
    args.emplace_back("--log-level");
    args.emplace_back("warn");
    d->proc = spawn_proc(args, 0, d->log);
    return d;
}

std::unique_ptr<Daemon> start_counting_daemon(const Run &run, const std::string &name,
                                              const std::vector<std::string> &extra) {
    auto d = std::make_unique<Daemon>();
    d->name = name;
    std::vector<std::string> args = relay_daemon_args(run, name, extra);
    args.emplace_back("--log-level");
    args.emplace_back("debug"); // the per-step lines it counts are debug lines
    d->proc = spawn_proc(args, 2, "");
    d->reader = std::thread(count_batches, d.get());
    return d;
}

ProcExit stop_daemon(Daemon &d) {
    if (d.proc.pid > 0) {
        kill(d.proc.pid, SIGTERM);
    }
    // Reap first: the pipe's EOF comes when the process is gone.
    int fd = d.proc.out;
    d.proc.out = -1; // the reader thread owns the pipe until it has seen EOF
    ProcExit e = reap(d.proc);
    if (d.reader.joinable()) {
        d.reader.join();
    }
    if (fd >= 0) {
        close(fd);
    }
    return e;
}

bool daemon_alive(const Daemon &d) {
    if (d.proc.pid <= 0) {
        return false;
    }
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(d.proc.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

void require_alive(const Daemon &d) {
    if (!daemon_alive(d)) {
        die(d.name + " (outbox relay) exited; the end of its log " + d.log + ":\n" + file_tail(d.log));
    }
}

} // namespace bench
