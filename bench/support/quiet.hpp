// Judging a figure only on a quiet machine (issue 30). On a shared virtual machine the hypervisor
// takes a varying share of the CPU (steal); a ratio of two measurements means something only when
// neither side lost CPU that way. measure_quiet() measures both sides of a figure (one attempt),
// reads the steal of each, and measures again after an idle wait while either side saw more than
// QuietRule::max_steal, for at most QuietRule::wait_s per figure. Its Judging gives the verdict:
// PASS or MISS on a quiet attempt, UNJUDGED otherwise (never PASS on a noisy pair), and the
// attempts it took. Depends on nothing but util.hpp, so its unit test needs no services.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bench {

struct QuietRule {
    double max_steal = 0.02; // a side is quiet when at most this share of the CPU was stolen around it
    double wait_s = 600;     // per figure: no attempt starts later than this after the first began
    bool retry = true;       // false: one attempt (--no-retry; --quick)
    double pause_s = 10;     // the idle probe between attempts: a quiet one lets the next attempt start
};

// How a figure was judged: the attempts made and the kept attempt's sides (the quiet one, else the
// least noisy).
struct Judging {
    int attempts = 0;
    int kept = 0; // which attempt's measurement is kept (1-based)
    bool quiet = false;
    std::vector<double> steal; // the kept attempt's sides (0..1; -1: not measured, which is not quiet)
    std::vector<double> worst; // per attempt, the steal of its noisiest side
    std::string note;          // why it stopped without a quiet pair; "" when quiet
    // "PASS" or "MISS" when the kept attempt was quiet, "UNJUDGED" otherwise.
    [[nodiscard]] std::string verdict(bool pass) const;
};

// True when every side was measured and saw at most rule.max_steal stolen.
bool quiet_sides(const QuietRule &rule, const std::vector<double> &steals);

// What the judging waits with: idle(s) idles about s seconds and returns the share of the CPU
// stolen meanwhile (-1: unknown); now() reads a monotonic clock in seconds.
struct Waiter {
    std::function<double(double)> idle;
    std::function<double()> now;
};
// Sleeps (stopping on SIGINT/SIGTERM), /proc/stat, the steady clock.
Waiter real_waiter();

// The bookkeeping of measure_quiet, one figure's attempts.
class QuietLoop {
  public:
    QuietLoop(std::string name, const QuietRule &rule, Waiter waiter);
    // Records an attempt's sides; true when it is the one to keep (quiet, or less noisy than before).
    bool record(const std::vector<double> &steals);
    // True when another attempt is to be made: none was quiet yet, retrying is on, and an idle
    // probe was quiet before the bound ran out (it idles in QuietRule::pause_s probes until then).
    bool again();
    [[nodiscard]] const Judging &judging() const { return j_; }

  private:
    std::string name_;
    QuietRule rule_;
    Waiter waiter_;
    double t0_;
    Judging j_;
};

template <class T> struct Quiet {
    T value;     // the kept attempt's measurement
    Judging how; // its judging
};

// Measures `measure(attempt)` (attempt 1, 2, ...; one attempt measures every side of the figure)
// until `steals_of(value)` (the steal of each side) is quiet by `rule`, or the rule stops it.
template <class T, class Measure, class Steals>
Quiet<T> measure_quiet(const std::string &name, const QuietRule &rule, Measure measure, Steals steals_of,
                       const Waiter &waiter = real_waiter()) {
    QuietLoop loop(name, rule, waiter);
    std::optional<T> kept;
    do {
        T v = measure(loop.judging().attempts + 1);
        if (loop.record(steals_of(v))) {
            kept = std::move(v);
        }
    } while (loop.again());
    return Quiet<T>{std::move(*kept), loop.judging()};
}

// The judging of sides measured once, where measuring them again is not possible: one attempt.
Judging judge_once(const std::string &name, const QuietRule &rule, const std::vector<double> &steals);

// "2%" or "?" for an unmeasured share.
std::string steal_pct(double share);

} // namespace bench
