// outbox._native: a mechanical pybind11 layer over the public C API (outbox.h) and nothing else.
//
// - One class per handle (Config, Db, Relay, Consumer, Message); the destructor calls the C
//   destroy function. Every handle has a mutex, taken with the GIL released, so a handle shared
//   between Python threads is used by one at a time (outbox.h: handles are not thread-safe).
// - Every status becomes an exception of the class outbox/_errors.py registered for it, with
//   the C message (outbox_last_error(), read on the thread that made the call).
// - The GIL is released around every call that can block. Long waits are cut into slices of
//   200 ms with PyErr_CheckSignals() between them; calls that cannot be sliced (relay run,
//   consumer run, relay step) run on a worker thread while the caller's thread waits in slices,
//   and a KeyboardInterrupt asks them to stop (outbox_*_stop), waits for them, then propagates.
//
// The Pythonic API (events, JSON, drivers, transactions, the consumer loop) is python/outbox/.
#include "marshal.hpp"
#include "write_plan.hpp"

#include <outbox.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;
using namespace pybind11::literals;
using namespace outbox_py; // NOLINT(google-build-using-namespace): the binding's own helpers

namespace {

// ----------------------------------------------------------------------------- Message

// The envelope's fields (outbox_envelope_field) by the Python attribute that holds their text: the
// name in lower case, "id" for the event's id, "_json" after a JSON object's; _native.ENVELOPE.
const std::vector<std::pair<std::string, const char *>> &envelope_fields() {
    static const std::vector<std::pair<std::string, const char *>> fields = [] {
        std::vector<std::pair<std::string, const char *>> out;
        const char *name = nullptr;
        outbox_field_kind kind = OUTBOX_FIELD_TEXT;
        for (size_t i = 0; outbox_envelope_field(&name, &kind, i) == OUTBOX_OK; ++i) {
            std::string attr = i == 0 ? "id" : name; // the first is the event's id (OUTBOX_ID)
            std::transform(attr.begin(), attr.end(), attr.begin(), [](unsigned char c) { return std::tolower(c); });
            out.emplace_back(kind == OUTBOX_FIELD_JSON ? attr + "_json" : attr, name);
        }
        return out;
    }();
    return fields;
}

class Message {
  public:
    Message(const outbox_message *h, bool owned) : h_(h), owned_(owned) {}
    ~Message() { close(); }
    Message(const Message &) = delete;
    Message &operator=(const Message &) = delete;

    void close() {
        if (owned_) {
            outbox_message_free(const_cast<outbox_message *>(h_));
        }
        h_ = nullptr;
    }
    bool closed() const { return h_ == nullptr; }
    const outbox_message *handle() const {
        if (h_ == nullptr) {
            throw_error(OUTBOX_ERR_INVALID_ARGUMENT,
                        "the message is closed (a message a handler receives is valid only during the call)");
        }
        return h_;
    }
    py::object field(const std::string &name) const {
        return opt_str(outbox_message_field(handle(), no_nul(name, "field name").c_str()));
    }
    py::object property(const std::string &name) const {
        return opt_str(outbox_message_property(handle(), no_nul(name, "property name").c_str()));
    }
    // Everything a Python Message reads, in one call (views die with their handler call), keyed by
    // the Python attribute names: the envelope's text fields (envelope_fields) and the delivery.
    py::dict snapshot() const {
        const outbox_message *m = handle();
        py::dict d;
        for (const auto &[attr, field] : envelope_fields()) {
            d[attr.c_str()] = opt_str(outbox_message_field(m, field));
        }
        size_t n = 0;
        const char *b = outbox_message_body(m, &n);
        d["body"] = py::bytes(b != nullptr ? b : "", n);
        d["seq"] = outbox_message_seq(m);
        d["redelivered"] = outbox_message_redelivered(m) != 0;
        d["delivery_count"] = outbox_message_delivery_count(m);
        d["order"] = static_cast<int>(outbox_message_order(m));
        d["previous_seq"] = outbox_message_previous_seq(m);
        d["routing_key"] = opt_str(outbox_message_property(m, "routing_key"));
        return d;
    }

  private:
    const outbox_message *h_;
    bool owned_;
};

// ----------------------------------------------------------------------------- Db

class Consumer;

// Db.execute()'s parameters as outbox_db_query() takes them: None is SQL NULL, the rest str.
std::vector<std::optional<std::string>> query_params(const py::sequence &params) {
    std::vector<std::optional<std::string>> values;
    values.reserve(static_cast<size_t>(py::len(params)));
    for (py::handle p : params) {
        if (p.is_none()) {
            values.emplace_back(std::nullopt);
        } else {
            values.emplace_back(cstr(p, "parameter"));
        }
    }
    return values;
}

// (rows as tuples of str/None, affected rows or -1, command tag) from outbox_db_query()'s rows.
py::tuple query_result(const outbox_rows *res) {
    py::list rows;
    const size_t nrows = outbox_rows_count(res);
    const size_t ncols = outbox_rows_columns(res);
    for (size_t i = 0; i < nrows; ++i) {
        py::tuple row(ncols);
        for (size_t j = 0; j < ncols; ++j) {
            size_t len = 0;
            const char *v = outbox_rows_value(res, i, j, &len);
            row[j] = v != nullptr ? py::object(text(v, len)) : py::object(py::none());
        }
        rows.append(std::move(row));
    }
    return py::make_tuple(rows, outbox_rows_affected(res), opt_str(outbox_rows_command(res)));
}

// An optional text argument: None is NULL.
class OptText {
  public:
    OptText(const py::object &o, const char *what) : has_(!o.is_none()) {
        if (has_) {
            s_ = cstr(o, what);
        }
    }
    const char *get() const { return has_ ? s_.c_str() : nullptr; }

  private:
    bool has_;
    std::string s_;
};

// A string the library allocated, copied and given back to its free.
std::string owned_text(char *s) {
    std::string out = s != nullptr ? s : "";
    outbox_string_free(s);
    return out;
}

class Db {
  public:
    Db(outbox_db *h, bool owned, bool view = false) : h_(h), owned_(owned), view_(view) {}
    ~Db() {
        if (h_ != nullptr && !view_) {
            outbox_db *h = h_;
            h_ = nullptr;
            if (owned_ && Py_IsInitialized() && PyGILState_Check()) {
                py::gil_scoped_release nogil; // closing sends a Terminate message
                outbox_db_close(h);
            } else {
                outbox_db_close(h);
            }
        }
    }
    Db(const Db &) = delete;
    Db &operator=(const Db &) = delete;

    static std::unique_ptr<Db> open(const std::string &conninfo, const Config *cfg) {
        no_nul(conninfo, "connection URL");
        outbox_db *h = nullptr;
        Failure f;
        {
            py::gil_scoped_release nogil;
            f = failure(outbox_db_open(&h, conninfo.c_str(), cfg_of(cfg)));
        }
        check(f);
        return std::make_unique<Db>(h, true);
    }
    // pg.url of the configuration; OUTBOX_PG_URL when it has none (outbox_config_from_env).
    static std::unique_ptr<Db> open_config(Config &cfg) {
        outbox_db *h = nullptr;
        Failure f;
        {
            py::gil_scoped_release nogil;
            f = failure(outbox_db_open_config(&h, cfg.get_handle()));
        }
        check(f);
        return std::make_unique<Db>(h, true);
    }

    void close() {
        if (view_) {
            h_ = nullptr;
            return;
        }
        outbox_db *h = nullptr;
        locked(mu_, [&] {
            h = h_;
            h_ = nullptr;
            outbox_db_close(h);
            return 0;
        });
    }
    void invalidate() { h_ = nullptr; }
    outbox_db *handle() const {
        if (h_ == nullptr) {
            throw_error(OUTBOX_ERR_INVALID_ARGUMENT,
                        view_ ? "the handler's transaction is over (the Db a handler receives "
                                "is valid only during the call)"
                              : "the Db is closed");
        }
        return h_;
    }
    std::mutex &mutex() { return mu_; }

    uintptr_t pgconn() const { return reinterpret_cast<uintptr_t>(outbox_db_pgconn(handle())); }

    void exec(const std::string &sql) {
        no_nul(sql, "SQL");
        outbox_db *h = handle();
        check(locked(mu_, [&] { return failure(outbox_db_exec(h, sql.c_str())); }));
    }
    int tx_state() {
        outbox_db *h = handle();
        return locked(mu_, [&] { return static_cast<int>(outbox_db_tx_state(h)); });
    }
    int migrate(int target) {
        outbox_db *h = handle();
        int version = 0;
        check(locked(mu_,
                     [&] { return failure(outbox_migrate(&version, h, static_cast<outbox_migrate_target>(target))); }));
        return version;
    }
    py::tuple write(const py::tuple &fields) {
        outbox_db *h = handle();
        EventHandle ev;
        fill_event(ev.p, fields);
        check(locked(mu_, [&] { return failure(outbox_write(h, ev.p)); }));
        return written(ev.p);
    }
    py::tuple dedupe(const std::string &consumer, const std::string &event_id, const py::object &aggregate_type,
                     const py::object &aggregate_id, int64_t seq) {
        no_nul(consumer, "consumer name");
        no_nul(event_id, "event id");
        outbox_db *h = handle();
        std::optional<std::string> at;
        std::optional<std::string> ai;
        if (!aggregate_type.is_none()) {
            at = cstr(aggregate_type, "aggregate_type");
        }
        if (!aggregate_id.is_none()) {
            ai = cstr(aggregate_id, "aggregate_id");
        }
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        check(locked(mu_, [&] {
            return failure(outbox_consumer_dedupe(&r, h, consumer.c_str(), event_id.c_str(), at ? at->c_str() : nullptr,
                                                  ai ? ai->c_str() : nullptr, seq));
        }));
        return py::make_tuple(r.first_time != 0, r.order, r.previous_seq);
    }
    int64_t purge_inbox(int64_t older_than_s, int batch) {
        outbox_db *h = handle();
        int64_t deleted = 0;
        check(locked(mu_, [&] { return failure(outbox_inbox_purge(&deleted, h, older_than_s, batch)); }));
        return deleted;
    }
    // The gauges an operator alerts on, as Prometheus text (outbox_metrics_text).
    std::string metrics_text() {
        outbox_db *h = handle();
        char *text = nullptr;
        check(locked(mu_, [&] { return failure(outbox_metrics_text(&text, h)); }));
        return owned_text(text);
    }
    // Parked aggregates (outbox_parked_*): the JSON texts as they are, for the package to parse.
    std::string parked_list(const py::object &consumer, bool include_relay, int limit) {
        const OptText who(consumer, "consumer");
        outbox_db *h = handle();
        char *json = nullptr;
        check(locked(mu_,
                     [&] { return failure(outbox_parked_list(&json, h, who.get(), include_relay ? 1 : 0, limit)); }));
        return owned_text(json);
    }
    int64_t parked_redrive(const py::object &consumer, const py::object &aggregate_type,
                           const std::string &aggregate_id) {
        const OptText who(consumer, "consumer");
        const OptText at(aggregate_type, "aggregate_type");
        no_nul(aggregate_id, "aggregate_id");
        outbox_db *h = handle();
        int64_t n = 0;
        check(locked(mu_,
                     [&] { return failure(outbox_parked_redrive(&n, h, who.get(), at.get(), aggregate_id.c_str())); }));
        return n;
    }
    int64_t parked_redrive_all(const py::object &consumer) {
        const OptText who(consumer, "consumer");
        outbox_db *h = handle();
        int64_t n = 0;
        check(locked(mu_, [&] { return failure(outbox_parked_redrive_all(&n, h, who.get())); }));
        return n;
    }
    std::string parked_skip(const py::object &consumer, const py::object &aggregate_type,
                            const std::string &aggregate_id, const py::object &event_id, const std::string &by,
                            const std::string &reason) {
        const OptText at(aggregate_type, "aggregate_type");
        const OptText eid(event_id, "event_id");
        const OptText who(consumer, "consumer");
        no_nul(aggregate_id, "aggregate_id");
        no_nul(by, "by");
        no_nul(reason, "reason");
        outbox_db *h = handle();
        char *skipped = nullptr;
        check(locked(mu_, [&] {
            return failure(outbox_parked_skip(&skipped, h, who.get(), at.get(), aggregate_id.c_str(), eid.get(),
                                              by.c_str(), reason.c_str()));
        }));
        return owned_text(skipped);
    }

    // The caller's own SQL with text parameters (outbox_db_query). Returns (rows, affected, status);
    // a failure raises with the server's SQLSTATE.
    py::tuple execute(const std::string &sql, const py::sequence &params) {
        no_nul(sql, "SQL");
        outbox_db *h = handle();
        const std::vector<std::optional<std::string>> values = query_params(params);
        std::vector<const char *> ptrs;
        ptrs.reserve(values.size());
        for (const auto &v : values) {
            ptrs.push_back(v ? v->c_str() : nullptr);
        }
        outbox_rows *res = nullptr;
        const Failure f = locked(mu_, [&] {
            Failure r = failure(outbox_db_query(&res, h, sql.c_str(), ptrs.data(), ptrs.size()));
            r.sqlstate = outbox_last_sqlstate();
            return r;
        });
        std::unique_ptr<outbox_rows, void (*)(outbox_rows *)> guard(res, outbox_rows_free);
        if (f) {
            throw_error(f);
        }
        return query_result(res);
    }

  private:
    outbox_db *h_;
    bool owned_;
    bool view_;
    std::mutex mu_;
};

py::tuple render_write(const Config *cfg, const py::tuple &fields) {
    EventHandle ev;
    fill_event(ev.p, fields);
    outbox_statement *st = nullptr;
    check(failure(outbox_render_write(&st, cfg_of(cfg), ev.p)));
    std::unique_ptr<outbox_statement, void (*)(outbox_statement *)> guard(st, outbox_statement_free);
    py::tuple s = statement_tuple(st);
    return py::make_tuple(s[0], s[1], opt_str(outbox_event_id(ev.p)), opt_str(outbox_event_type(ev.p)));
}

py::tuple render_dedupe(const Config *cfg, const std::string &consumer, const std::string &event_id,
                        const py::object &aggregate_type, const py::object &aggregate_id, int64_t seq) {
    no_nul(consumer, "consumer name");
    no_nul(event_id, "event id");
    std::optional<std::string> at;
    std::optional<std::string> ai;
    if (!aggregate_type.is_none()) {
        at = cstr(aggregate_type, "aggregate_type");
    }
    if (!aggregate_id.is_none()) {
        ai = cstr(aggregate_id, "aggregate_id");
    }
    outbox_statement *st = nullptr;
    check(failure(outbox_render_dedupe(&st, cfg_of(cfg), consumer.c_str(), event_id.c_str(), at ? at->c_str() : nullptr,
                                       ai ? ai->c_str() : nullptr, seq)));
    std::unique_ptr<outbox_statement, void (*)(outbox_statement *)> guard(st, outbox_statement_free);
    return statement_tuple(st);
}

// The library's error for a driver's failure on a statement the library rendered (outbox_driver_error):
// (status, message), for the face to raise with the driver's exception as its cause.
py::tuple driver_error(const std::string &context, const py::object &sqlstate, const std::string &message,
                       bool closed) {
    const std::string ss = sqlstate.is_none() ? std::string() : cstr(sqlstate, "sqlstate");
    const Failure f = failure(outbox_driver_error(context.c_str(), ss.c_str(), message.c_str(), closed ? 1 : 0));
    return py::make_tuple(static_cast<int>(f.status), text(f.message));
}

// What a rendered dedupe statement's row means (outbox_dedupe_interpret_row, from the row's values
// as text): (first_time, order, previous_seq), as Db.dedupe reports them. previous_seq None: NULL.
py::tuple dedupe_interpret(const Config *cfg, const py::object &aggregate_type, const py::object &aggregate_id,
                           int64_t seq, const py::object &first_time, const py::object &previous_seq) {
    std::optional<std::string> at;
    std::optional<std::string> ai;
    if (!aggregate_type.is_none()) {
        at = cstr(aggregate_type, "aggregate_type");
    }
    if (!aggregate_id.is_none()) {
        ai = cstr(aggregate_id, "aggregate_id");
    }
    const std::string first = py::str(first_time);
    std::optional<std::string> prev;
    if (!previous_seq.is_none()) {
        prev = py::str(previous_seq).cast<std::string>();
    }
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    check(failure(outbox_dedupe_interpret_row(&r, cfg_of(cfg), at ? at->c_str() : nullptr, ai ? ai->c_str() : nullptr,
                                              seq, first.c_str(), prev ? prev->c_str() : nullptr)));
    return py::make_tuple(r.first_time != 0, r.order, r.previous_seq);
}

// ----------------------------------------------------------------------------- Relay

py::tuple stats_tuple(const outbox_relay_stats &s) {
    return py::make_tuple(s.claimed, s.published, s.failed, s.dead, s.held_back, s.unroutable, s.nacked, s.unconfirmed,
                          s.claim_us, s.publish_us, s.mark_us, s.total_us, s.blocked != 0);
}

class Relay {
  public:
    Relay(const Config &cfg, py::object log) {
        check(failure(outbox_relay_new(&h_, cfg.get_handle())));
        if (!log.is_none()) {
            sink_ = std::make_unique<LogSink>(LogSink{std::move(log)});
            check(failure(outbox_relay_set_logger(h_, &LogSink::call, sink_.get())));
        }
    }
    ~Relay() { close(); }
    Relay(const Relay &) = delete;
    Relay &operator=(const Relay &) = delete;

    void close() {
        if (h_ == nullptr) {
            return;
        }
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lk(mu_);
            std::lock_guard<std::mutex> slk(stop_mu_);
            outbox_relay_free(h_); // closes both connections
            h_ = nullptr;
        }
        sink_.reset();
    }
    outbox_relay *handle() const {
        if (h_ == nullptr) {
            throw_error(OUTBOX_ERR_INVALID_ARGUMENT, "the relay is closed");
        }
        return h_;
    }

    py::tuple step(bool on_main_thread) {
        outbox_relay *h = handle();
        outbox_relay_stats stats;
        outbox_relay_stats_init(&stats);
        std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
        {
            py::gil_scoped_release nogil;
            lk.lock();
        }
        bool interrupted = false;
        Failure f;
        try {
            f = interruptible(
                on_main_thread, [&] { return failure(outbox_relay_step(h, &stats)); },
                [&] {
                    interrupted = true;
                    outbox_relay_stop(h);
                });
        } catch (py::error_already_set &) {
            if (interrupted) {
                outbox_relay_reset(h); // our own stop request: the step finished what was in flight
            }
            throw;
        }
        check(f);
        return stats_tuple(stats);
    }
    void run(bool on_main_thread) {
        outbox_relay *h = handle();
        std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
        {
            py::gil_scoped_release nogil;
            lk.lock();
        }
        bool interrupted = false;
        Failure f;
        try {
            f = interruptible(
                on_main_thread, [&] { return failure(outbox_relay_run(h)); },
                [&] {
                    interrupted = true;
                    outbox_relay_stop(h);
                });
        } catch (py::error_already_set &) {
            if (interrupted) {
                outbox_relay_reset(h); // our own stop: the relay can run again
            }
            throw;
        }
        check(f);
    }
    void stop() {
        std::lock_guard<std::mutex> lk(stop_mu_); // never held long: safe to take with the GIL
        outbox_relay_stop(h_);
    }
    void reset() {
        outbox_relay *h = handle();
        check(locked(mu_, [&] { return failure(outbox_relay_reset(h)); }));
    }

  private:
    outbox_relay *h_ = nullptr;
    std::mutex mu_;
    std::mutex stop_mu_;
    std::unique_ptr<LogSink> sink_;
};

// ----------------------------------------------------------------------------- Consumer

class Consumer {
  public:
    Consumer(const Config &cfg, const std::string &name, py::object log) {
        no_nul(name, "consumer name");
        check(failure(outbox_consumer_new(&h_, cfg.get_handle(), name.c_str())));
        if (!log.is_none()) {
            sink_ = std::make_unique<LogSink>(LogSink{std::move(log)});
            check(failure(outbox_consumer_set_logger(h_, &LogSink::call, sink_.get())));
        }
    }
    ~Consumer() { close(); }
    Consumer(const Consumer &) = delete;
    Consumer &operator=(const Consumer &) = delete;

    void close() {
        if (h_ == nullptr) {
            return;
        }
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lk(mu_);
            std::lock_guard<std::mutex> slk(stop_mu_);
            outbox_consumer_free(h_);
            h_ = nullptr;
        }
        sink_.reset();
    }
    outbox_consumer *handle() const {
        if (h_ == nullptr) {
            throw_error(OUTBOX_ERR_INVALID_ARGUMENT, "the consumer is closed");
        }
        return h_;
    }

    void connect() {
        outbox_consumer *h = handle();
        check(locked(mu_, [&] { return failure(outbox_consumer_connect(h)); }));
    }

    // Waits up to timeout_ms (< 0: until a message or a stop) in slices; None on timeout.
    std::unique_ptr<Message> next(int64_t timeout_ms) {
        outbox_consumer *h = handle();
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
        while (true) {
            int wait = slice_ms;
            if (timeout_ms >= 0) {
                auto left =
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
                        .count();
                wait = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, slice_ms)));
            }
            outbox_message *m = nullptr;
            Failure f = locked(mu_, [&] { return failure(outbox_consumer_next(&m, h, wait)); });
            if (!f) {
                return std::make_unique<Message>(m, true);
            }
            if (f.status != OUTBOX_ERR_TIMEOUT) {
                throw_error(f);
            }
            if (PyErr_CheckSignals() != 0) {
                throw py::error_already_set();
            }
            if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
                return nullptr;
            }
        }
    }
    void ack(const Message &msg) {
        outbox_consumer *h = handle();
        const outbox_message *m = msg.handle();
        check(locked(mu_, [&] { return failure(outbox_consumer_ack(h, m)); }));
    }
    void nack(const Message &msg, bool requeue) {
        outbox_consumer *h = handle();
        const outbox_message *m = msg.handle();
        check(locked(mu_, [&] { return failure(outbox_consumer_nack(h, m, requeue ? 1 : 0)); }));
    }
    void dead_letter(const Message &msg, const py::str &reason) {
        outbox_consumer *h = handle();
        const outbox_message *m = msg.handle();
        std::string why = cstr(reason, "reason");
        check(locked(mu_, [&] { return failure(outbox_consumer_dead_letter(h, m, why.c_str())); }));
    }

    void stop() {
        std::lock_guard<std::mutex> lk(stop_mu_);
        outbox_consumer_stop(h_);
    }
    void reset() {
        outbox_consumer *h = handle();
        check(locked(mu_, [&] { return failure(outbox_consumer_reset(h)); }));
    }
    outbox_consumer *mut() const { return handle(); }
    std::mutex &mutex() { return mu_; }

  private:
    outbox_consumer *h_ = nullptr;
    std::mutex mu_;
    std::mutex stop_mu_;
    std::unique_ptr<LogSink> sink_;
};

// ----------------------------------------------------------------------------- Loop

// outbox_loop_*: the library's consumer loop as a step machine, which the package drives blocking
// or in asyncio (python/outbox/_handles.py). Only marshalling here.
class Loop {
  public:
    Loop(py::object consumer, Db *db, int connection, int64_t idle_timeout_ms, int64_t limit,
         const py::object &placeholders)
        : consumer_obj_(std::move(consumer)), consumer_(&consumer_obj_.cast<Consumer &>()) {
        outbox_loop_options o;
        outbox_loop_options_init(&o);
        o.connection = connection;
        o.idle_timeout_ms = static_cast<int32_t>(std::clamp<int64_t>(idle_timeout_ms, -1, INT32_MAX));
        o.limit = limit;
        std::string ph;
        if (!placeholders.is_none()) {
            ph = cstr(placeholders, "placeholders");
            o.placeholders = ph.c_str();
        }
        if (db != nullptr) {
            db_obj_ = py::cast(db, py::return_value_policy::reference);
        }
        check(failure(outbox_loop_new(&h_, consumer_->mut(), db != nullptr ? db->handle() : nullptr, &o)));
    }
    ~Loop() { outbox_loop_free(h_); }
    Loop(const Loop &) = delete;
    Loop &operator=(const Loop &) = delete;

    int next() { return static_cast<int>(outbox_loop_next(h_)); }
    // Blocking (a message, the library connection's statements, settling): the GIL released.
    void block() {
        check(locked(consumer_->mutex(), [&] { return failure(outbox_loop_block(h_)); }));
    }
    // (kind, sql, params)
    py::tuple statement() {
        int kind = 0;
        const outbox_statement *st = outbox_loop_statement(h_, &kind);
        if (st == nullptr) {
            throw_error(OUTBOX_ERR_INVALID_ARGUMENT, "the loop's next action is not exec");
        }
        py::tuple t = statement_tuple(const_cast<outbox_statement *>(st));
        return py::make_tuple(kind, t[0], t[1]);
    }
    void exec_done(const py::object &row) {
        const TextRow values(row);
        check(failure(outbox_loop_exec_done(h_, values.data(), values.size())));
    }
    void exec_failed(const py::object &sqlstate, const std::string &message, bool closed) {
        std::string ss = sqlstate.is_none() ? std::string() : cstr(sqlstate, "sqlstate");
        check(failure(outbox_loop_exec_failed(h_, ss.c_str(), message.c_str(), closed ? 1 : 0)));
    }
    // The delivery, as a view valid until handler_done().
    py::object message() {
        const outbox_message *m = outbox_loop_message(h_);
        if (m == nullptr) {
            return py::none();
        }
        last_msg_ = py::cast(std::make_unique<Message>(m, false));
        return last_msg_;
    }
    // The library connection's transaction, as a view valid until handler_done(); None on a driver's.
    py::object db() {
        outbox_db *d = outbox_loop_db(h_);
        if (d == nullptr) {
            return py::none();
        }
        last_db_ = py::cast(std::make_unique<Db>(d, false, true));
        return last_db_;
    }
    void handler_done(int result, const py::object &reason) {
        release_views();
        std::string why = reason.is_none() ? std::string() : py::str(reason).cast<std::string>();
        check(failure(outbox_loop_handler_done(h_, result, reason.is_none() ? nullptr : why.c_str())));
    }
    int wait_ms() const { return outbox_loop_wait_ms(h_); }
    void waited() { check(failure(outbox_loop_waited(h_))); }
    void abort(const std::string &reason) {
        release_views();
        check(failure(outbox_loop_abort(h_, reason.c_str())));
    }
    // The events handled; raises the error the loop ended with.
    int64_t result() const {
        int64_t handled = 0;
        check(failure(outbox_loop_result(h_, &handled)));
        return handled;
    }

  private:
    // The views handed to a handler die with its call (a handler may keep the Python objects).
    void release_views() {
        if (!last_db_.is_none()) {
            last_db_.cast<Db &>().invalidate();
            last_db_ = py::none();
        }
        if (!last_msg_.is_none()) {
            last_msg_.cast<Message &>().close();
            last_msg_ = py::none();
        }
    }
    py::object consumer_obj_;
    py::object db_obj_;
    py::object last_db_ = py::none();
    py::object last_msg_ = py::none();
    Consumer *consumer_;
    outbox_loop *h_ = nullptr;
};

} // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "outbox._native: the pybind11 layer over liboutbox's C API (use the `outbox` package instead)";

    m.def("version", [] { return std::string(outbox_version()); });
    m.def("version_number", &outbox_version_number);
    m.def("status_name", [](int st) { return std::string(outbox_status_name(static_cast<outbox_status>(st))); });
    m.def("status_retriable", [](int st) { return outbox_status_retriable(static_cast<outbox_status>(st)) != 0; });
    // The C API's constants, from outbox.h as this module was compiled against it.
    for (const auto &[name, value] : std::initializer_list<std::pair<const char *, int>>{
             {"LOOP_BLOCK", OUTBOX_LOOP_BLOCK},
             {"LOOP_EXEC", OUTBOX_LOOP_EXEC},
             {"LOOP_HANDLE", OUTBOX_LOOP_HANDLE},
             {"LOOP_WAIT", OUTBOX_LOOP_WAIT},
             {"LOOP_DONE", OUTBOX_LOOP_DONE},
             {"LOOP_SQL_BEGIN", OUTBOX_LOOP_SQL_BEGIN},
             {"LOOP_SQL_DEDUPE", OUTBOX_LOOP_SQL_DEDUPE},
             {"LOOP_SQL_COMMIT", OUTBOX_LOOP_SQL_COMMIT},
             {"LOOP_SQL_ROLLBACK", OUTBOX_LOOP_SQL_ROLLBACK},
             {"LOOP_SQL_STATEMENT", OUTBOX_LOOP_SQL_STATEMENT},
             {"LOOP_LIBRARY", OUTBOX_LOOP_LIBRARY},
             {"LOOP_DRIVER_LENT", OUTBOX_LOOP_DRIVER_LENT},
             {"HANDLER_OK", OUTBOX_HANDLER_OK},
             {"HANDLER_FAILED", OUTBOX_HANDLER_FAILED},
             {"HANDLER_PERMANENT", OUTBOX_HANDLER_PERMANENT},
             {"TX_IDLE", OUTBOX_TX_IDLE},
             {"TX_ACTIVE", OUTBOX_TX_ACTIVE},
             {"TX_INTRANS", OUTBOX_TX_INTRANS},
             {"TX_INERROR", OUTBOX_TX_INERROR},
             {"TX_UNKNOWN", OUTBOX_TX_UNKNOWN},
             {"ORDER_UNCHECKED", OUTBOX_ORDER_UNCHECKED},
             {"ORDER_IN_ORDER", OUTBOX_ORDER_IN_ORDER},
             {"ORDER_STALE", OUTBOX_ORDER_STALE},
             {"ORDER_GAP", OUTBOX_ORDER_GAP},
             {"MIGRATE_ALL", OUTBOX_MIGRATE_ALL},
             {"MIGRATE_OUTBOX", OUTBOX_MIGRATE_OUTBOX},
             {"MIGRATE_INBOX", OUTBOX_MIGRATE_INBOX},
             {"FIELD_TEXT", OUTBOX_FIELD_TEXT},
             {"FIELD_JSON", OUTBOX_FIELD_JSON},
             {"FIELD_FLAG", OUTBOX_FIELD_FLAG},
         }) {
        m.attr(name) = value;
    }
    py::dict statuses; // the status numbers by name (outbox_status_name)
    for (int st = OUTBOX_OK; st >= OUTBOX_ERR_NOT_FOUND; --st) {
        statuses[py::str(outbox_status_name(static_cast<outbox_status>(st)))] = st;
    }
    m.attr("STATUS") = statuses;
    py::dict envelope; // attribute -> envelope field name
    for (const auto &[attr, field] : envelope_fields()) {
        envelope[attr.c_str()] = field;
    }
    m.attr("ENVELOPE") = envelope;
    // The transaction statements of outbox_loop_sql (outbox.h), for Db.begin/commit/rollback.
    m.attr("TX_SQL") = py::dict("begin"_a = outbox_loop_sql_text(OUTBOX_LOOP_SQL_BEGIN),
                                "commit"_a = outbox_loop_sql_text(OUTBOX_LOOP_SQL_COMMIT),
                                "rollback"_a = outbox_loop_sql_text(OUTBOX_LOOP_SQL_ROLLBACK));
    m.def("_set_error_classes", [](py::dict classes) {
        error_classes().clear();
        for (auto item : classes) {
            error_classes()[item.first] = item.second;
        }
    });
    m.def("event_fields", [] {
        py::list out;
        for (const auto &[name, kind] : event_field_list()) {
            out.append(py::make_tuple(py::str(name), kind));
        }
        return py::tuple(out);
    });
    m.def("libpq_version", &outbox_libpq_version);

    py::class_<Config>(m, "Config")
        .def(py::init<>())
        .def("set", &Config::set, "key"_a, "value"_a)
        .def("get", &Config::get, "key"_a)
        .def("from_env", &Config::from_env, "overwrite"_a)
        .def_static("keys", &Config::keys);

    py::class_<Message>(m, "Message")
        .def("close", &Message::close)
        .def_property_readonly("closed", &Message::closed)
        .def("field", &Message::field, "name"_a)
        .def("property", &Message::property, "name"_a)
        .def("snapshot", &Message::snapshot);

    py::class_<Db>(m, "Db")
        .def_static("open", &Db::open, "conninfo"_a, "config"_a = nullptr)
        .def_static("open_config", &Db::open_config, "config"_a)
        .def("close", &Db::close)
        .def("pgconn", &Db::pgconn)
        .def("exec", &Db::exec, "sql"_a)
        .def("tx_state", &Db::tx_state)
        .def("migrate", &Db::migrate, "target"_a)
        .def("write", &Db::write, "fields"_a)
        .def("dedupe", &Db::dedupe, "consumer"_a, "event_id"_a, "aggregate_type"_a, "aggregate_id"_a, "seq"_a)
        .def("purge_inbox", &Db::purge_inbox, "older_than_s"_a, "batch"_a)
        .def("metrics_text", &Db::metrics_text)
        .def("parked_list", &Db::parked_list, "consumer"_a, "include_relay"_a, "limit"_a)
        .def("parked_redrive", &Db::parked_redrive, "consumer"_a, "aggregate_type"_a, "aggregate_id"_a)
        .def("parked_redrive_all", &Db::parked_redrive_all, "consumer"_a)
        .def("parked_skip", &Db::parked_skip, "consumer"_a, "aggregate_type"_a, "aggregate_id"_a, "event_id"_a, "by"_a,
             "reason"_a)
        .def("execute", &Db::execute, "sql"_a, "params"_a);

    m.def("render_write", &render_write, "config"_a, "fields"_a);
    m.def("render_dedupe", &render_dedupe, "config"_a, "consumer"_a, "event_id"_a, "aggregate_type"_a, "aggregate_id"_a,
          "seq"_a);
    m.def("driver_error", &driver_error, "context"_a, "sqlstate"_a, "message"_a, "closed"_a);
    m.def("dedupe_interpret", &dedupe_interpret, "config"_a, "aggregate_type"_a, "aggregate_id"_a, "seq"_a,
          "first_time"_a, "previous_seq"_a);

    py::class_<Relay>(m, "Relay")
        .def(py::init<const Config &, py::object>(), "config"_a, "log"_a = py::none())
        .def("close", &Relay::close)
        .def("step", &Relay::step, "on_main_thread"_a)
        .def("run", &Relay::run, "on_main_thread"_a)
        .def("stop", &Relay::stop)
        .def("reset", &Relay::reset);

    py::class_<Consumer>(m, "Consumer")
        .def(py::init<const Config &, const std::string &, py::object>(), "config"_a, "name"_a, "log"_a = py::none())
        .def("close", &Consumer::close)
        .def("connect", &Consumer::connect)
        .def("next", &Consumer::next, "timeout_ms"_a)
        .def("ack", &Consumer::ack, "message"_a)
        .def("nack", &Consumer::nack, "message"_a, "requeue"_a)
        .def("dead_letter", &Consumer::dead_letter, "message"_a, "reason"_a)
        .def("stop", &Consumer::stop)
        .def("reset", &Consumer::reset);

    register_write_plan(m);

    py::class_<Loop>(m, "Loop")
        .def(py::init<py::object, Db *, int, int64_t, int64_t, const py::object &>(), "consumer"_a, "db"_a,
             "connection"_a, "idle_timeout_ms"_a, "limit"_a, "placeholders"_a)
        .def("next", &Loop::next)
        .def("block", &Loop::block)
        .def("statement", &Loop::statement)
        .def("exec_done", &Loop::exec_done, "row"_a)
        .def("exec_failed", &Loop::exec_failed, "sqlstate"_a, "message"_a, "closed"_a)
        .def("message", &Loop::message)
        .def("db", &Loop::db)
        .def("handler_done", &Loop::handler_done, "result"_a, "reason"_a)
        .def("wait_ms", &Loop::wait_ms)
        .def("waited", &Loop::waited)
        .def("abort", &Loop::abort, "reason"_a)
        .def("result", &Loop::result);
}
