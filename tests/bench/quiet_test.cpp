// The bench's judging of figures on quiet runs (bench/support/quiet.hpp, issue 30), with fake
// measurements, fake steal and a fake clock: no services, no waiting.
#include "support/quiet.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using bench::measure_quiet;
using bench::QuietRule;
using bench::Waiter;

// One attempt of a figure: both sides' steal, and which attempt it was.
struct Pair {
    int attempt = 0;
    std::vector<double> steal;
};

// A clock that moves only when the judging idles or a fake measurement takes time; idle probes
// report `idle_steal`.
struct FakeTime {
    double t = 0;
    double idle_steal = 0;
    int idles = 0;
    Waiter waiter() {
        return Waiter{[this](double s) {
                          t += s;
                          ++idles;
                          return idle_steal;
                      },
                      [this] { return t; }};
    }
};

QuietRule rule(double wait_s) {
    QuietRule r;
    r.max_steal = 0.02;
    r.wait_s = wait_s;
    r.pause_s = 10;
    return r;
}

// Measures attempt k with the steal of script[k-1] (the last entry from then on), 30 s each.
bench::Quiet<Pair> judge(FakeTime &clock, const QuietRule &r, std::vector<std::vector<double>> script) {
    auto measure = [&](int k) {
        clock.t += 30;
        const size_t i = std::min(static_cast<size_t>(k - 1), script.size() - 1);
        return Pair{k, script[i]};
    };
    return measure_quiet<Pair>(
        "test", r, measure, [](const Pair &p) { return p.steal; }, clock.waiter());
}

TEST(QuietJudging, QuietFirstAttemptIsJudged) {
    FakeTime clock;
    const auto q = judge(clock, rule(600), {{0.0, 0.015}});
    EXPECT_EQ(q.how.attempts, 1);
    EXPECT_TRUE(q.how.quiet);
    EXPECT_EQ(q.how.verdict(true), "PASS");
    EXPECT_EQ(q.how.verdict(false), "MISS");
    EXPECT_EQ(q.how.steal, (std::vector<double>{0.0, 0.015}));
    EXPECT_EQ(clock.idles, 0);
}

TEST(QuietJudging, NoisyThenQuietTakesTwoAttemptsAndKeepsTheQuietOne) {
    FakeTime clock;
    const auto q = judge(clock, rule(600), {{0.01, 0.05}, {0.02, 0.0}});
    EXPECT_EQ(q.how.attempts, 2);
    EXPECT_TRUE(q.how.quiet);
    EXPECT_EQ(q.value.attempt, 2);
    EXPECT_EQ(q.how.verdict(true), "PASS");
    EXPECT_EQ(q.how.worst.size(), 2U);
    EXPECT_GE(clock.idles, 1); // it idled before measuring again
}

TEST(QuietJudging, AlwaysNoisyIsUnjudgedAfterTheBoundNeverPass) {
    FakeTime clock;
    const auto q = judge(clock, rule(100), {{0.0, 0.09}});
    EXPECT_FALSE(q.how.quiet);
    EXPECT_EQ(q.how.verdict(true), "UNJUDGED");
    EXPECT_EQ(q.how.verdict(false), "UNJUDGED");
    // 30 s per attempt and a 10 s probe between: attempts start at 0, 40, 80 of a 100 s bound.
    EXPECT_EQ(q.how.attempts, 3);
    EXPECT_LE(clock.t, 100 + 30);
    EXPECT_FALSE(q.how.note.empty());
}

TEST(QuietJudging, RetryingOffKeepsOneAttemptAndStaysUnjudged) {
    FakeTime clock;
    QuietRule r = rule(600);
    r.retry = false;
    const auto q = judge(clock, r, {{0.3, 0.0}, {0.0, 0.0}});
    EXPECT_EQ(q.how.attempts, 1);
    EXPECT_EQ(q.how.verdict(true), "UNJUDGED");
    EXPECT_EQ(clock.idles, 0);
}

TEST(QuietJudging, AnUnmeasuredSideIsNotQuiet) {
    FakeTime clock;
    QuietRule r = rule(600);
    r.retry = false;
    const auto q = judge(clock, r, {{0.0, -1}});
    EXPECT_EQ(q.how.verdict(true), "UNJUDGED");
    EXPECT_FALSE(bench::quiet_sides(r, {}));
}

TEST(QuietJudging, ANoisyIdleProbeWaitsInsteadOfMeasuring) {
    FakeTime clock;
    clock.idle_steal = 0.2;
    const auto q = judge(clock, rule(120), {{0.05, 0.0}, {0.0, 0.0}});
    EXPECT_EQ(q.how.attempts, 1); // no probe was quiet: the second attempt never started
    EXPECT_EQ(q.how.verdict(true), "UNJUDGED");
    EXPECT_GE(clock.idles, 8);
    EXPECT_LE(clock.t, 120 + 1e-9);
}

TEST(QuietJudging, WithoutAQuietPairTheLeastNoisyAttemptIsKept) {
    FakeTime clock;
    const auto q = judge(clock, rule(100), {{0.30, 0.0}, {0.04, 0.01}, {0.10, 0.10}});
    EXPECT_EQ(q.how.attempts, 3);
    EXPECT_EQ(q.value.attempt, 2);
    EXPECT_EQ(q.how.kept, 2);
    EXPECT_EQ(q.how.steal, (std::vector<double>{0.04, 0.01}));
    EXPECT_EQ(q.how.verdict(true), "UNJUDGED");
}

TEST(QuietJudging, SidesMeasuredOnceAreJudgedOnOneAttempt) {
    const auto quiet = bench::judge_once("test", rule(600), {0.01, 0.0});
    EXPECT_EQ(quiet.attempts, 1);
    EXPECT_EQ(quiet.verdict(false), "MISS");
    const auto noisy = bench::judge_once("test", rule(600), {0.01, 0.03});
    EXPECT_EQ(noisy.attempts, 1);
    EXPECT_EQ(noisy.verdict(true), "UNJUDGED");
}

TEST(QuietJudging, TheThresholdIsInclusive) {
    QuietRule r = rule(600);
    EXPECT_TRUE(bench::quiet_sides(r, {0.02, 0.02}));
    EXPECT_FALSE(bench::quiet_sides(r, {0.0201, 0.0}));
}

} // namespace
