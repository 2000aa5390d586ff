// Test helper: runs a shell command (rabbitmqctl through scripts/services.sh, and the like).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace outbox_test {

// Runs `cmd` with stderr joined to stdout; returns the output and sets *rc to its exit code
// (-1 when it could not run or did not exit normally).
inline std::string shell(const std::string &cmd, int *rc) {
    std::string out;
    FILE *p = popen((cmd + " 2>&1").c_str(), "r");
    if (p == nullptr) {
        *rc = -1;
        return out;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
        out.append(buf, n);
    }
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

} // namespace outbox_test
