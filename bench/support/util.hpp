// The small things every part of the bench uses: the clock, errors, interruption, numbers as text.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b);
// The steady clock in nanoseconds: the time stamps compared across threads (L, X).
int64_t now_ns();
int64_t ns_of(Clock::time_point t);

// Every failure of the harness is an exception with this message; main prints it and exits 1.
[[noreturn]] void die(const std::string &msg);

// Set by SIGINT and SIGTERM; long loops call check_interrupt() (or test it) and stop.
extern std::atomic<bool> g_interrupted;
extern "C" void on_signal(int);
void check_interrupt();

std::string env_or(const char *name, const char *fallback);
// The servers, from OUTBOX_PG_URL and OUTBOX_AMQP_URL (default: the scripts/services.sh endpoints).
std::string pg_url_from_env();
std::string amqp_url_from_env();

long peak_rss_kib();
// CPU time of this process (all threads), user + system.
double cpu_seconds();
// The machine's CPU time from /proc/stat's first line: all of it and what the hypervisor took for
// other guests (steal). A shared virtual machine loses a varying share; a figure is read with it.
struct CpuTimes {
    unsigned long long total = 0, steal = 0, idle = 0; // idle: idle + iowait
};
CpuTimes cpu_times();
// The share of the machine's CPU left idle between two readings (0..1), or -1.
double idle_share(const CpuTimes &a, const CpuTimes &b);

// CPU time (user + system, seconds) of the servers on this machine, from /proc: every beam.smp
// process (RabbitMQ, all of its threads) and every postgres process, plus what each postmaster's
// reaped backends used (cutime + cstime), so that a backend that ended meanwhile still counts.
// Differences of two readings give what the servers spent on a measurement; every node of the
// local clusters counts (bench/run --cluster), and so would another checkout's servers.
struct ServerCpu {
    double broker_s = 0, pg_s = 0;
};
ServerCpu server_cpu();
// The share of the CPU stolen between two readings (0..1), or -1 when /proc/stat is not there.
double steal_share(const CpuTimes &a, const CpuTimes &b);

std::string fixed(double v, int decimals);
std::string rate_str(double r);
// 10000 -> "10k", 1000000 -> "1M"; other counts as they are.
std::string count_label(long n);
const char *verdict(bool pass);
double percentile(std::vector<double> v, double p);
double median(std::vector<double> v);

// A thread that runs until asked to stop: start(fn) runs fn, whose loop ends once stopping() is
// true; stop() asks and joins (the destructor too, so declare a Worker after what its thread uses).
class Worker {
  public:
    Worker() = default;
    ~Worker() { stop(); }
    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;
    template <class F> void start(F fn) { th_ = std::thread(std::move(fn)); }
    [[nodiscard]] bool stopping() const { return stop_.load(); }
    void stop() {
        stop_.store(true);
        if (th_.joinable()) {
            th_.join();
        }
    }

  private:
    std::atomic<bool> stop_{false};
    std::thread th_;
};

// An integer option value in [lo, hi], or die() naming the option.
long parse_long(const std::string &opt, const char *v, long lo, long hi);

} // namespace bench
