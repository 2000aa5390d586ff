#include "util.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace bench {

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

int64_t ns_of(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t now_ns() {
    return ns_of(Clock::now());
}

void die(const std::string &msg) {
    throw std::runtime_error(msg);
}

std::atomic<bool> g_interrupted{false};
extern "C" void on_signal(int) {
    g_interrupted.store(true);
}
void check_interrupt() {
    if (g_interrupted.load()) {
        die("interrupted");
    }
}

std::string env_or(const char *name, const char *fallback) {
    const char *v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

std::string pg_url_from_env() {
    return env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox");
}

std::string amqp_url_from_env() {
    return env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f");
}

long peak_rss_kib() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

double cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

CpuTimes cpu_times() {
    CpuTimes t;
    FILE *f = std::fopen("/proc/stat", "r");
    if (f == nullptr) {
        return t;
    }
    unsigned long long v[8] = {};
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                    &v[7]) == 8) {
        for (unsigned long long x : v) {
            t.total += x;
        }
        t.steal = v[7];
        t.idle = v[3] + v[4];
    }
    std::fclose(f);
    return t;
}

double steal_share(const CpuTimes &a, const CpuTimes &b) {
    if (b.total <= a.total) {
        return -1;
    }
    return static_cast<double>(b.steal - a.steal) / static_cast<double>(b.total - a.total);
}

double idle_share(const CpuTimes &a, const CpuTimes &b) {
    if (b.total <= a.total) {
        return -1;
    }
    return static_cast<double>(b.idle - a.idle) / static_cast<double>(b.total - a.total);
}

namespace {
// One /proc/<pid>/stat: its command name, parent and CPU times in clock ticks; false when the
// process is gone or the file is not as expected.
struct ProcStat {
    std::string comm;
    long ppid = 0;
    unsigned long long utime = 0, stime = 0, cutime = 0, cstime = 0;
};
bool read_proc_stat(const std::string &pid, ProcStat &ps) {
    std::ifstream f("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(f, line)) {
        return false;
    }
    // comm is in parentheses and may hold spaces or ')': the last ')' ends it.
    const size_t open = line.find('(');
    const size_t close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) {
        return false;
    }
    ps.comm = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long skip = 0;
    rest >> state >> ps.ppid;
    for (int i = 0; i < 9; ++i) { // pgrp .. cmajflt
        rest >> skip;
    }
    long long cut = 0, cst = 0;
    rest >> ps.utime >> ps.stime >> cut >> cst;
    ps.cutime = static_cast<unsigned long long>(std::max(0LL, cut));
    ps.cstime = static_cast<unsigned long long>(std::max(0LL, cst));
    return static_cast<bool>(rest);
}
} // namespace

ServerCpu server_cpu() {
    ServerCpu s;
    DIR *d = opendir("/proc");
    if (d == nullptr) {
        return s;
    }
    std::map<long, ProcStat> postgres;
    unsigned long long beam = 0;
    while (const dirent *e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') {
            continue;
        }
        ProcStat ps;
        if (!read_proc_stat(e->d_name, ps)) {
            continue;
        }
        if (ps.comm == "beam.smp") {
            beam += ps.utime + ps.stime;
        } else if (ps.comm == "postgres") {
            postgres.emplace(std::strtol(e->d_name, nullptr, 10), ps);
        }
    }
    closedir(d);
    unsigned long long pg = 0;
    for (const auto &[pid, ps] : postgres) {
        pg += ps.utime + ps.stime;
        if (postgres.count(ps.ppid) == 0) { // a postmaster: its backends, once reaped
            pg += ps.cutime + ps.cstime;
        }
    }
    const auto hz = static_cast<double>(sysconf(_SC_CLK_TCK));
    s.broker_s = static_cast<double>(beam) / hz;
    s.pg_s = static_cast<double>(pg) / hz;
    return s;
}

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string count_label(long n) {
    if (n >= 1000000 && n % 1000000 == 0) {
        return std::to_string(n / 1000000) + "M";
    }
    if (n >= 1000 && n % 1000 == 0) {
        return std::to_string(n / 1000) + "k";
    }
    return std::to_string(n);
}

std::string rate_str(double r) {
    return fixed(r, 0) + " events/s";
}

const char *verdict(bool pass) {
    return pass ? "PASS" : "MISS";
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double median(std::vector<double> v) {
    return percentile(std::move(v), 50);
}

long parse_long(const std::string &opt, const char *v, long lo, long hi) {
    char *end = nullptr;
    errno = 0;
    long n = std::strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) {
        die(opt + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
    }
    return n;
}

} // namespace bench
