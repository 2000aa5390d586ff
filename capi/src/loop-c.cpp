// The consumer loop as a step machine (core/consumer_loop.hpp): outbox_loop_*.
#include "capi.hpp"

#include "consumer_loop.hpp"

#include <cstring>
#include <optional>

using outbox::capi::guard;

struct outbox_loop {
    outbox_loop(outbox_consumer *c, outbox::LoopConn kind, outbox_db *db, outbox::LoopOptions o)
        : consumer(c), loop(c->consumer, kind, db != nullptr ? &db->conn : nullptr, std::move(o)) {}
    outbox_consumer *consumer;
    outbox::ConsumerLoop loop;
    outbox_statement stmt;             // the statement handed out, as a borrowed outbox_statement
    std::optional<outbox_message> msg; // the delivery handed to the handler
    std::optional<outbox_db> view;     // the library connection, lent to the handler
};

namespace {

outbox_status not_at(const char *what) {
    outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, what);
    return OUTBOX_ERR_INVALID_ARGUMENT;
}

outbox::LoopConn kind_of(int32_t connection, const outbox_db *db) {
    switch (connection) {
    case OUTBOX_LOOP_LIBRARY:
        return db != nullptr ? outbox::LoopConn::library_lent : outbox::LoopConn::library_own;
    case OUTBOX_LOOP_DRIVER_LENT:
    case OUTBOX_LOOP_DRIVER_OWNED:
        if (db != nullptr) {
            outbox::fail(outbox::Errc::invalid_argument, "a driver connection's loop takes no outbox_db");
        }
        return connection == OUTBOX_LOOP_DRIVER_LENT ? outbox::LoopConn::face_lent : outbox::LoopConn::face_owned;
    default:
        outbox::fail(outbox::Errc::invalid_argument,
                     "unknown connection kind " + std::to_string(connection) + " (OUTBOX_LOOP_LIBRARY, _DRIVER_*)");
    }
}

} // namespace

outbox_status outbox_loop_new(outbox_loop **out, outbox_consumer *consumer, outbox_db *db,
                              const outbox_loop_options *options) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(consumer);
    outbox_loop_options o;
    outbox_loop_options_init(&o);
    if (options != nullptr) {
        if (options->size < sizeof(size_t)) {
            return not_at("options->size must be set (outbox_loop_options_init)");
        }
        std::memcpy(&o, options, std::min(options->size, sizeof o));
        o.size = sizeof o;
    }
    return guard([&] {
        outbox::LoopOptions lo;
        lo.limit = o.limit;
        lo.idle_timeout_ms = o.idle_timeout_ms;
        lo.placeholders = o.placeholders != nullptr ? o.placeholders : "";
        lo.slice_ms = o.slice_ms > 0 ? o.slice_ms : 200;
        *out = new outbox_loop(consumer, kind_of(o.connection, db), db, std::move(lo));
    });
}

void outbox_loop_free(outbox_loop *loop) {
    delete loop;
}

outbox_loop_action outbox_loop_next(outbox_loop *loop) {
    if (loop == nullptr) {
        return OUTBOX_LOOP_DONE;
    }
    const auto a = loop->loop.action();
    if (a != outbox::LoopAction::handle) {
        loop->msg.reset();
        loop->view.reset();
    }
    return static_cast<outbox_loop_action>(a);
}

outbox_status outbox_loop_block(outbox_loop *loop) {
    OUTBOX_REQUIRE(loop);
    return guard([&] { loop->loop.block(); });
}

const char *outbox_loop_sql_text(outbox_loop_sql kind) {
    return outbox::sql_text(static_cast<outbox::SqlKind>(kind));
}

const outbox_statement *outbox_loop_statement(const outbox_loop *loop, int *kind) {
    if (kind != nullptr) {
        *kind = 0;
    }
    if (loop == nullptr || loop->loop.sql_kind() == outbox::SqlKind::none) {
        return nullptr;
    }
    if (kind != nullptr) {
        *kind = static_cast<int>(loop->loop.sql_kind());
    }
    auto *self = const_cast<outbox_loop *>(loop);
    self->stmt.st = loop->loop.statement();
    return &self->stmt;
}

outbox_status outbox_loop_exec_done(outbox_loop *loop, const char *const *row, size_t columns) {
    OUTBOX_REQUIRE(loop);
    if (columns > 0 && row == nullptr) {
        return not_at("row is NULL with columns > 0");
    }
    return guard([&] {
        std::vector<std::optional<std::string>> values;
        for (size_t i = 0; i < columns; ++i) {
            values.emplace_back(row[i] != nullptr ? std::optional<std::string>(row[i]) : std::nullopt);
        }
        loop->loop.exec_done(values);
    });
}

outbox_status outbox_loop_exec_failed(outbox_loop *loop, const char *sqlstate, const char *message,
                                      int connection_closed) {
    OUTBOX_REQUIRE(loop);
    return guard([&] {
        loop->loop.exec_failed(sqlstate != nullptr ? sqlstate : "",
                               outbox::message_text(message != nullptr ? message : "statement failed"),
                               connection_closed != 0);
    });
}

const outbox_message *outbox_loop_message(outbox_loop *loop) {
    if (loop == nullptr || loop->loop.action() != outbox::LoopAction::handle) {
        return nullptr;
    }
    if (!loop->msg) {
        loop->msg.emplace(outbox_message{loop->loop.delivery(), {}});
    }
    return &*loop->msg;
}

outbox_db *outbox_loop_db(outbox_loop *loop) {
    if (loop == nullptr || loop->loop.action() != outbox::LoopAction::handle || loop->loop.connection() == nullptr) {
        return nullptr;
    }
    if (!loop->view) {
        loop->view.emplace(
            outbox_db{outbox::pg::Conn::wrap(loop->loop.connection()->raw()), loop->consumer->consumer.config()});
    }
    return &*loop->view;
}

outbox_status outbox_loop_handler_done(outbox_loop *loop, int result, const char *reason) {
    OUTBOX_REQUIRE(loop);
    if (result != OUTBOX_HANDLER_OK && result != OUTBOX_HANDLER_FAILED && result != OUTBOX_HANDLER_PERMANENT) {
        return not_at("unknown handler result (OUTBOX_HANDLER_*)");
    }
    return guard([&] {
        loop->msg.reset();
        loop->view.reset();
        loop->loop.handler_done(static_cast<outbox::HandlerResult>(result),
                                outbox::message_text(reason != nullptr ? reason : ""));
    });
}

int outbox_loop_wait_ms(const outbox_loop *loop) {
    return loop != nullptr ? loop->loop.wait_ms() : 0;
}

outbox_status outbox_loop_waited(outbox_loop *loop) {
    OUTBOX_REQUIRE(loop);
    return guard([&] { loop->loop.waited(); });
}

outbox_status outbox_loop_opened(outbox_loop *loop, int ok, const char *message) {
    OUTBOX_REQUIRE(loop);
    return guard(
        [&] { loop->loop.opened(ok != 0, outbox::message_text(message != nullptr ? message : "connection failed")); });
}

outbox_status outbox_loop_abort(outbox_loop *loop, const char *reason) {
    OUTBOX_REQUIRE(loop);
    return guard([&] {
        loop->msg.reset();
        loop->view.reset();
        loop->loop.abort(outbox::message_text(reason != nullptr ? reason : "interrupted"));
    });
}

outbox_status outbox_loop_result(const outbox_loop *loop, int64_t *handled) {
    if (handled != nullptr) {
        *handled = loop != nullptr ? loop->loop.handled() : 0;
    }
    OUTBOX_REQUIRE(loop);
    outbox::capi::clear_error();
    const auto &e = loop->loop.error();
    if (!e) {
        return OUTBOX_OK;
    }
    const auto st = static_cast<outbox_status>(static_cast<int>(e->code()));
    outbox::capi::set_error(st, e->what());
    return st;
}
