// Test helper: a program run as a child process (the `outbox` CLI, the fault-suite consumer), its
// stdout and stderr in one file, environment inherited with some variables replaced. Killed with
// SIGKILL and reaped on destruction if still running.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace outbox_test {

class ChildProcess {
  public:
    // args[0] is the program's path; env holds NAME=VALUE entries replacing or adding to ours.
    explicit ChildProcess(std::vector<std::string> args, const std::vector<std::string> &env = {}) {
        static int n = 0;
        log_ = "/tmp/outbox-child-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".log";
        std::vector<std::string> env_store;
        for (char **e = environ; *e != nullptr; ++e) {
            const std::string entry = *e;
            bool replaced = false;
            for (const auto &r : env) {
                replaced = replaced || entry.compare(0, r.find('=') + 1, r, 0, r.find('=') + 1) == 0;
            }
            if (!replaced) {
                env_store.push_back(entry);
            }
        }
        env_store.insert(env_store.end(), env.begin(), env.end());
        std::vector<char *> argv, envp;
        for (auto &a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        for (auto &e : env_store) {
            envp.push_back(e.data());
        }
        envp.push_back(nullptr);
        pid_ = fork();
        if (pid_ == 0) {
            const int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            const int in = open("/dev/null", O_RDONLY);
            dup2(in, 0);
            dup2(out, 1);
            dup2(out, 2);
            for (int fd = 3; fd < 1024; ++fd) { // nothing of the test's (broker connections) leaks in
                close(fd);
            }
            execve(argv[0], argv.data(), envp.data());
            _exit(127);
        }
    }
    ChildProcess(const ChildProcess &) = delete;
    ChildProcess &operator=(const ChildProcess &) = delete;
    ~ChildProcess() {
        if (running()) {
            ::kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        unlink(log_.c_str());
    }

    [[nodiscard]] bool running() const { return pid_ > 0 && !reaped_; }
    [[nodiscard]] std::string output() const {
        std::ifstream in(log_);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    // True once the output holds `what` (false after timeout_ms, or when the process exited first).
    bool wait_output(const std::string &what, int timeout_ms) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (std::chrono::steady_clock::now() < end) {
            if (output().find(what) != std::string::npos) {
                return true;
            }
            if (wait(0) != -1) {
                return output().find(what) != std::string::npos;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }
    void signal(int sig) const {
        if (running()) {
            ::kill(pid_, sig);
        }
    }
    // Exit code (128 + signal when killed by one), or -1 when it did not exit within timeout_ms.
    int wait(int timeout_ms) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (running()) {
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                reaped_ = true;
                code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                break;
            }
            if (std::chrono::steady_clock::now() >= end) {
                return -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return pid_ > 0 ? code_ : -1;
    }
    // SIGTERM, then the exit code (-1 when it did not exit within timeout_ms).
    int terminate(int timeout_ms = 15000) {
        signal(SIGTERM);
        return wait(timeout_ms);
    }

  private:
    pid_t pid_ = -1;
    bool reaped_ = false;
    int code_ = -1;
    std::string log_;
};

} // namespace outbox_test
