#include "util.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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
