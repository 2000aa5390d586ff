#include "quiet.hpp"

#include "util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace bench {

namespace {

// The noisiest side's share; an unmeasured side counts as noisier than any measured one.
double worst_of(const std::vector<double> &steals) {
    double w = 0;
    for (double s : steals) {
        w = std::max(w, s < 0 ? 2.0 : s);
    }
    return w;
}

std::string sides_text(const std::vector<double> &steals) {
    std::string out;
    for (double s : steals) {
        out += (out.empty() ? "" : " / ") + steal_pct(s);
    }
    return out;
}

void say(const std::string &msg) {
    std::fprintf(stderr, "bench: %s\n", msg.c_str());
    std::fflush(stderr);
}

} // namespace

std::string steal_pct(double share) {
    if (share < 0) {
        return "?";
    }
    return fixed(100.0 * share, share < 0.1 ? 1 : 0) + "%";
}

std::string Judging::verdict(bool pass) const {
    return quiet ? bench::verdict(pass) : "UNJUDGED";
}

bool quiet_sides(const QuietRule &rule, const std::vector<double> &steals) {
    return !steals.empty() &&
           std::all_of(steals.begin(), steals.end(), [&](double s) { return s >= 0 && s <= rule.max_steal; });
}

Waiter real_waiter() {
    Waiter w;
    w.idle = [](double seconds) {
        const CpuTimes a = cpu_times();
        const auto until = Clock::now() + std::chrono::duration<double>(seconds);
        while (Clock::now() < until) {
            check_interrupt();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return steal_share(a, cpu_times());
    };
    w.now = [] { return seconds_between(Clock::time_point(), Clock::now()); };
    return w;
}

QuietLoop::QuietLoop(std::string name, const QuietRule &rule, Waiter waiter)
    : name_(std::move(name)), rule_(rule), waiter_(std::move(waiter)), t0_(waiter_.now()) {}

bool QuietLoop::record(const std::vector<double> &steals) {
    ++j_.attempts;
    const double worst = worst_of(steals);
    j_.worst.push_back(worst);
    const bool quiet = quiet_sides(rule_, steals);
    const bool keep = quiet || j_.attempts == 1 || worst < worst_of(j_.steal);
    if (keep) {
        j_.steal = steals;
        j_.quiet = quiet;
        j_.kept = j_.attempts;
    }
    say("[" + name_ + "] attempt " + std::to_string(j_.attempts) + ": CPU stolen " + sides_text(steals) +
        (quiet ? " (quiet)" : " (over " + steal_pct(rule_.max_steal) + ")"));
    return keep;
}

bool QuietLoop::again() {
    if (j_.quiet) {
        j_.note.clear();
        return false;
    }
    if (!rule_.retry) {
        j_.note = "one attempt (retrying off)";
        return false;
    }
    say("[" + name_ + "] waiting for a quiet moment (at most " + fixed(rule_.wait_s, 0) +
        " s since the first attempt)");
    while (waiter_.now() - t0_ + rule_.pause_s <= rule_.wait_s) {
        const double s = waiter_.idle(rule_.pause_s);
        if (s >= 0 && s <= rule_.max_steal) {
            return true;
        }
    }
    j_.note = "no quiet pair in " + std::to_string(j_.attempts) + " attempt(s) within " + fixed(rule_.wait_s, 0) + " s";
    return false;
}

Judging judge_once(const std::string &name, const QuietRule &rule, const std::vector<double> &steals) {
    QuietRule once = rule;
    once.retry = false;
    QuietLoop loop(name, once, real_waiter());
    loop.record(steals);
    loop.again();
    return loop.judging();
}

} // namespace bench
