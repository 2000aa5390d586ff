// The relay's bookkeeping of positions (core/stream.hpp, Progress): pure logic, no services.
#include "stream.hpp"

#include <gtest/gtest.h>

namespace {

using outbox::stream::Progress;
using outbox::stream::Runs;
using outbox::stream::Snapshot;

Snapshot snap(uint64_t xmin) {
    Snapshot s;
    s.xmin = xmin;
    s.xmax = xmin;
    return s;
}

TEST(Progress, TheCursorStopsBelowAGapUntilItIsFinal) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 2, 4}, snap(100)); // 3 is missing: a write in flight or rolled back
    EXPECT_EQ(p.advance(), 2);
    p.set_bound(150);
    p.observe(p.recheck(10), {}, {}, snap(120)); // a transaction older than the bound still runs
    EXPECT_EQ(p.advance(), 2);
    p.observe(p.recheck(10), {}, {}, snap(150));
    EXPECT_EQ(p.advance(), 4);
}

TEST(Progress, AGapFilledLateIsReadAndKeptUntilHandled) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 3}, snap(10));
    p.set_bound(20);
    p.observe(p.recheck(10), {2}, {}, snap(15));
    p.retry(2); // read, not yet confirmed
    EXPECT_EQ(p.advance(), 1);
    p.observe(p.recheck(10), {2}, {}, snap(30));
    p.retry(2);
    EXPECT_EQ(p.advance(), 1) << "a retry found again holds the cursor";
}

TEST(Progress, HeldPositionsKeepTheCursorBelowThemUntilReleasedAndAreNotReadAgain) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 2, 3}, snap(10)); // the step's batch
    p.observe({}, {}, {4, 5, 6}, snap(10)); // the next batch, in flight, recorded by the next step
    for (int64_t h : {4, 5, 6}) {
        p.hold(h);
    }
    EXPECT_EQ(p.advance(), 3) << "the batch recorded, the cursor stops below the next";
    EXPECT_TRUE(p.recheck(10).empty()) << "held positions are not read again";
    EXPECT_EQ(p.frontier(), 6);
    p.release(4);
    p.release(5);
    p.retry(6); // not confirmed: read again
    p.release(6);
    EXPECT_EQ(p.advance(), 5);
    p.load(5, {}, {});
    p.hold(6);
    p.load(5, {}, {});
    p.observe({}, {}, {6}, snap(10));
    EXPECT_EQ(p.advance(), 6) << "reloading the progress forgets what was held";
}

TEST(Progress, ARetryThatIsNoLongerThereWasDeletedAndNoLongerHoldsTheCursor) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 2, 3}, snap(10));
    p.retry(2);
    EXPECT_EQ(p.advance(), 1);
    ASSERT_EQ(p.recheck(10), (Runs{{2, 2}}));
    p.observe(Runs{{2, 2}}, {}, {}, snap(11)); // deleted through the outbox view
    EXPECT_EQ(p.advance(), 3);
    EXPECT_TRUE(p.recheck(10).empty());
}

TEST(Progress, WhatReceiptsAndParkedEventsHoldAboveTheCursorIsDone) {
    Progress p;
    p.load(5, {{7, 9}}, {6, 12});
    EXPECT_TRUE(p.done(5));
    EXPECT_TRUE(p.done(6));
    EXPECT_TRUE(p.done(8));
    EXPECT_FALSE(p.done(10));
    EXPECT_TRUE(p.done(12));
    p.observe({}, {}, {10, 11, 13}, snap(1)); // 6..9 and 12 are done, not gaps
    EXPECT_EQ(p.gaps(), 0U);
    EXPECT_EQ(p.advance(), 13);
}

TEST(Progress, EventsPastTheFrontierWaitWhileARetryIsLeftOutOfTheRead) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 2, 3, 4, 5, 6}, snap(10));
    for (int64_t pos : {2, 4, 6}) {
        p.retry(pos); // read, not sent (the broker blocked publishing)
    }
    EXPECT_TRUE(p.covers_rechecks(p.recheck(10)));
    const Runs two = p.recheck(2);
    ASSERT_EQ(two, (Runs{{2, 2}, {4, 4}}));
    EXPECT_FALSE(p.covers_rechecks(two)) << "6 is left out: a later event of its aggregate must not go first";
}

// Found under load (four writers rolling back, a relay of batch 200): more gaps than a read
// rechecks. A gap left out may have committed since, with a later event of its aggregate past the
// frontier; reading that one first would break the aggregate's order.
TEST(Progress, EventsPastTheFrontierWaitWhileAGapIsLeftOutOfTheRead) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 3, 5, 7}, snap(10)); // 2, 4 and 6: writes in flight (or rolled back)
    EXPECT_EQ(p.gaps(), 3U);
    EXPECT_TRUE(p.covers_rechecks(p.recheck(10)));
    const Runs two = p.recheck(2);
    ASSERT_EQ(two, (Runs{{2, 2}, {4, 4}}));
    EXPECT_FALSE(p.covers_rechecks(two)) << "gap 6 is left out: nothing past the frontier may be read";
    p.retry(3);
    EXPECT_FALSE(p.covers_rechecks(p.recheck(3)));
    EXPECT_TRUE(p.covers_rechecks(p.recheck(4)));
}

// Found by bench Q after W (stop 37): a backlog behind positions the sequence skipped (a truncated
// table, a rolled-back write of many events) stalled the relay, a batch of single gaps read again a
// step. A jump is one run, read again whole, and final at once when its bound has passed.
TEST(Progress, AJumpOfTheSequenceIsOneRunReadAgainWholeAndFinalOnce) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 1000002, 1000003}, snap(10)); // 2..1000001 missing
    EXPECT_EQ(p.gaps(), 1000000U);
    const Runs runs = p.recheck(5);
    ASSERT_EQ(runs, (Runs{{2, 1000001}}));
    EXPECT_TRUE(p.covers_rechecks(runs));
    p.set_bound(20);
    p.observe(p.recheck(5), {500}, {}, snap(15)); // one committed late; the rest may still come
    EXPECT_EQ(p.recheck(5), (Runs{{2, 499}, {501, 1000001}}));
    EXPECT_EQ(p.gaps(), 999999U);
    p.observe(p.recheck(5), {}, {}, snap(20));
    EXPECT_EQ(p.gaps(), 0U);
    EXPECT_EQ(p.advance(), 1000003);
}

TEST(Progress, RunsCutAroundWhatWasDoneBeforeARestart) {
    Progress p;
    p.load(0, {{4, 5}}, {8});
    p.observe({}, {}, {1, 10}, snap(10)); // 2..9 missing, but 4, 5 and 8 are done
    EXPECT_EQ(p.recheck(10), (Runs{{2, 3}, {6, 7}, {9, 9}}));
    EXPECT_EQ(p.gaps(), 5U);
}

// A recheck read stops at its limit: only what it examined becomes final, and a retry above that
// point is not taken for deleted.
TEST(Progress, OnlyWhatARecheckExaminedBecomesFinal) {
    Progress p;
    p.load(0, {}, {});
    p.observe({}, {}, {1, 12, 13}, snap(10)); // 2..11 missing
    p.retry(13);
    p.set_bound(20);
    p.observe(p.recheck(10), {3, 4}, {}, snap(30), 4); // read up to 4: the limit of 2 events reached
    EXPECT_EQ(p.recheck(10), (Runs{{5, 11}, {13, 13}})) << "2 final; 5..11 not examined; 13 still to retry";
    p.observe(p.recheck(10), {}, {}, snap(30));
    EXPECT_EQ(p.recheck(10), (Runs{})) << "5..11 final, 13 deleted";
    EXPECT_EQ(p.advance(), 13);
}

// Receipts: runs of consecutive positions, each under max_receipt_span (the receipts table's
// CHECK, and the bound the monitoring view searches within).
TEST(Receipts, RunsOfConsecutivePositionsStayUnderTheSpanTheTableChecks) {
    std::vector<int64_t> positions{1, 2, 3, 7, 9, 10};
    EXPECT_EQ(outbox::stream::ranges(positions), (std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {7, 7}, {9, 10}}));
    positions.clear();
    for (int64_t p = 5; p < 5 + 2 * outbox::max_receipt_span + 10; ++p) {
        positions.push_back(p);
    }
    const auto runs = outbox::stream::ranges(positions);
    ASSERT_EQ(runs.size(), 3U);
    int64_t next = 5;
    for (const auto &[from, to] : runs) {
        EXPECT_EQ(from, next) << "contiguous, nothing left out";
        EXPECT_LT(to - from, outbox::max_receipt_span);
        next = to + 1;
    }
    EXPECT_EQ(next, 5 + 2 * outbox::max_receipt_span + 10);
}

} // namespace
