// The write of one event on a driver's connection, step by step (core/write_plan.hpp):
// outbox_write_plan_*.
#include "capi.hpp"

#include "write_plan.hpp"

#include <cstring>
#include <optional>

using outbox::capi::guard;

struct outbox_write_plan {
    outbox_write_plan(const outbox::Config &c, outbox::Event &ev, outbox::DriverTx tx, const std::string &style)
        : plan(c, ev, tx, style) {}
    outbox::WritePlan plan;
    mutable outbox_statement stmt; // the statement handed out, as a borrowed outbox_statement
};

namespace {

outbox::DriverTx tx_of(int v) {
    switch (v) {
    case OUTBOX_TX_IDLE:
        return outbox::DriverTx::idle;
    case OUTBOX_TX_INTRANS:
        return outbox::DriverTx::in_transaction;
    case OUTBOX_TX_INERROR:
        return outbox::DriverTx::aborted;
    default:
        outbox::fail(outbox::Errc::invalid_argument,
                     "tx must be OUTBOX_TX_IDLE, OUTBOX_TX_INTRANS or OUTBOX_TX_INERROR, not " + std::to_string(v));
    }
}

std::vector<std::optional<std::string>> row_of(const char *const *row, size_t columns) {
    std::vector<std::optional<std::string>> values;
    for (size_t i = 0; i < columns; ++i) {
        values.emplace_back(row[i] != nullptr ? std::optional<std::string>(row[i]) : std::nullopt);
    }
    return values;
}

} // namespace

outbox_status outbox_write_plan_new(outbox_write_plan **out, const outbox_config *cfg, outbox_event *ev,
                                    outbox_tx_state tx, const char *placeholders) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(ev);
    // Read as an int: a value outside the enum's range is legal C but undefined as a C++ enum load.
    int tx_value = 0;
    std::memcpy(&tx_value, &tx, sizeof tx_value);
    return guard([&] {
        static const outbox::Config defaults;
        *out = new outbox_write_plan(cfg != nullptr ? cfg->cfg : defaults, ev->ev, tx_of(tx_value),
                                     placeholders != nullptr ? placeholders : "");
    });
}

void outbox_write_plan_free(outbox_write_plan *plan) {
    delete plan;
}

const outbox_statement *outbox_write_plan_next(const outbox_write_plan *plan, int *step) {
    if (step != nullptr) {
        *step = 0;
    }
    if (plan == nullptr || plan->plan.done()) {
        return nullptr;
    }
    if (step != nullptr) {
        *step = static_cast<int>(plan->plan.step());
    }
    plan->stmt.st = plan->plan.statement();
    return &plan->stmt;
}

outbox_status outbox_write_plan_done(outbox_write_plan *plan, const char *const *row, size_t columns) {
    OUTBOX_REQUIRE(plan);
    if (columns > 0 && row == nullptr) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "row is NULL with columns > 0");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] { plan->plan.exec_done(row_of(row, columns)); });
}

outbox_status outbox_write_plan_failed(outbox_write_plan *plan, const char *sqlstate, const char *constraint,
                                       const char *message, int connection_closed) {
    OUTBOX_REQUIRE(plan);
    return guard([&] {
        plan->plan.exec_failed(sqlstate != nullptr ? sqlstate : "", constraint != nullptr ? constraint : "",
                               outbox::message_text(message != nullptr ? message : "statement failed"),
                               connection_closed != 0);
    });
}

outbox_status outbox_write_plan_result(const outbox_write_plan *plan) {
    OUTBOX_REQUIRE(plan);
    if (!plan->plan.done()) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "the write is not done: run the statement it hands out");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    outbox::capi::clear_error();
    const auto &e = plan->plan.error();
    if (!e) {
        return OUTBOX_OK;
    }
    const auto st = static_cast<outbox_status>(static_cast<int>(e->code()));
    outbox::capi::set_error(st, e->what());
    return st;
}
