// Shared by the bindings/node/src/*.cc files: the native layer of the npm package.
//
// A 1:1, mechanical wrapper over the public C API (capi/include/outbox.h), in the manner of
// duckdb-node-neo's bindings/: one JS function per C function (the `outbox_` prefix dropped),
// the idiomatic API lives in node/lib/. Only outbox.h is included, never a core/ header.
// The marshalling JS would otherwise repeat is done here, once: event field values as text,
// results and dedupe keys in the JS layer's shape, enum values by name, rendered statements as
// node-postgres queries and node-postgres errors as the facts the library judges (marshal.cc).
//
// - Handles are Napi::External values tagged with a per-type napi_type_tag, so a handle of
//   another type (or any other JS value) is refused with a TypeError, never dereferenced.
//   Their finalizers call the C destroy function; the *_free/*_close functions do it early.
// - Every call that can block on PostgreSQL or RabbitMQ returns a Promise and runs on a worker
//   thread (libuv's pool; a connection the library opened, on its own Lane; relay_run on a
//   thread of its own), except write_fields on an owned connection, which sends its statement
//   from the main thread without blocking and reads the result when libuv sees the socket
//   readable (outbox_write_send / outbox_write_poll; event.cc). A handle used by a pending operation is "busy": any
//   other use of it throws (the C handles are not thread-safe), except relay_stop/consumer_stop, which the C API allows
//   from any thread.
// - Errors: OutboxError (the class the JS layer registers with set_error_class) or Error, with
//   `code` = outbox_status_name(status) (e.g. "INVALID_EVENT") and `status` = the number.
#pragma once

#include <napi.h>
#include <outbox.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

struct uv_poll_s; // libuv's uv_poll_t (uv.h: Node's libuv, included where it is used)

namespace outbox_node {

// ---------------------------------------------------------------- enums

// The names JS sees for the C enums a face names (outbox.h as the addon was compiled against it).
struct EnumName {
    const char *name;
    int value;
};
inline constexpr EnumName kTxStates[] = {{"IDLE", OUTBOX_TX_IDLE},
                                         {"ACTIVE", OUTBOX_TX_ACTIVE},
                                         {"INTRANS", OUTBOX_TX_INTRANS},
                                         {"INERROR", OUTBOX_TX_INERROR},
                                         {"UNKNOWN", OUTBOX_TX_UNKNOWN}};
inline constexpr EnumName kOrders[] = {{"UNCHECKED", OUTBOX_ORDER_UNCHECKED},
                                       {"IN_ORDER", OUTBOX_ORDER_IN_ORDER},
                                       {"STALE", OUTBOX_ORDER_STALE},
                                       {"GAP", OUTBOX_ORDER_GAP}};
inline constexpr EnumName kMigrateTargets[] = {
    {"all", OUTBOX_MIGRATE_ALL}, {"outbox", OUTBOX_MIGRATE_OUTBOX}, {"inbox", OUTBOX_MIGRATE_INBOX}};
inline constexpr EnumName kLogLevels[] = {
    {"debug", OUTBOX_LOG_DEBUG}, {"info", OUTBOX_LOG_INFO}, {"warn", OUTBOX_LOG_WARN}, {"error", OUTBOX_LOG_ERROR}};

// The name of `value` in `table`, or the table's first name.
template <size_t N> const char *name_of(const EnumName (&table)[N], int value) {
    for (const auto &e : table) {
        if (e.value == value) {
            return e.name;
        }
    }
    return table[0].name;
}

// ---------------------------------------------------------------- errors

// The names of prepared statements, prefix_<hash of the text> (pg_query): the last few are kept, so
// a statement run per event (the loop's dedupe, the write plan's INSERT) is hashed the first time
// only, then its text just compared with the one the name was made for. Main thread only.
class StatementNames {
  public:
    const std::string &get(const char *prefix, std::string_view sql);

  private:
    struct Entry {
        std::string prefix, sql, name;
    };
    static constexpr size_t kMax = 16; // statement kinds x configurations in use; more are replaced in turn
    std::vector<Entry> entries_;
    size_t next_ = 0; // the entry replaced next once all kMax are taken
};

struct AddonData {
    Napi::FunctionReference error_class; // new ErrorClass(message, code, status)
    StatementNames statement_names;      // pg_query's
    // The scope polled writes (event.cc) settle in, made at the first: as the lane's, so a promise's
    // continuations run right after. Kept for the environment's life.
    napi_async_context write_context = nullptr;
    Napi::ObjectReference write_resource;
};

inline Napi::Error status_error(Napi::Env env, outbox_status status, const std::string &message) {
    const char *code = outbox_status_name(status);
    auto *data = env.GetInstanceData<AddonData>();
    if (data != nullptr && !data->error_class.IsEmpty()) {
        Napi::Object obj = data->error_class.New(
            {Napi::String::New(env, message), Napi::String::New(env, code), Napi::Number::New(env, status)});
        return Napi::Error(env, obj);
    }
    Napi::Error e = Napi::Error::New(env, message);
    e.Set("code", Napi::String::New(env, code));
    e.Set("status", Napi::Number::New(env, status));
    return e;
}

// Throws for a failed synchronous call; must run on the thread that made the call
// (outbox_last_error() is thread-local).
inline void check(Napi::Env env, outbox_status status) {
    if (status != OUTBOX_OK) {
        throw status_error(env, status, outbox_last_error());
    }
}

// A bad JS argument: a TypeError carrying the C API's code for bad arguments.
inline Napi::Error type_error(Napi::Env env, const std::string &message) {
    Napi::TypeError e = Napi::TypeError::New(env, message);
    e.Set("code", Napi::String::New(env, outbox_status_name(OUTBOX_ERR_INVALID_ARGUMENT)));
    e.Set("status", Napi::Number::New(env, OUTBOX_ERR_INVALID_ARGUMENT));
    return e;
}

inline Napi::Error argument_error(Napi::Env env, const std::string &message) {
    return status_error(env, OUTBOX_ERR_INVALID_ARGUMENT, message);
}

// ---------------------------------------------------------------- handles

// Guards a thread-safe function used from threads of our own: at environment teardown Node
// finalizes (and then deletes) thread-safe functions even while threads still hold them. Its
// finalizer sets `finalized` under the mutex; callers check it under the same mutex first.
struct TsfnGate {
    std::mutex m;
    bool finalized = false;
    static void on_finalize(Napi::Env, std::shared_ptr<TsfnGate> *gate, void *) {
        {
            std::lock_guard<std::mutex> lock((*gate)->m);
            (*gate)->finalized = true;
        }
        delete gate;
    }
};

// Log sink for relay/consumer loggers: C callbacks arrive on worker threads and are forwarded
// to a JS function (level name, message) through a thread-safe function that does not keep the
// event loop alive.
struct LogSink {
    Napi::ThreadSafeFunction tsfn;
    std::shared_ptr<TsfnGate> gate = std::make_shared<TsfnGate>();
    LogSink() = default;
    LogSink(const LogSink &) = delete;
    LogSink &operator=(const LogSink &) = delete;
    // Runs once the C object no longer calls the logger (it was replaced, or the object destroyed).
    ~LogSink() {
        std::lock_guard<std::mutex> lock(gate->m);
        if (!gate->finalized) {
            tsfn.Release();
        }
    }
};

// ---------------------------------------------------------------- lanes

class Worker;

// A thread of its own for one connection's operations (one at a time: a handle is busy while
// one is pending), for calls as short and as frequent as `await db.write(event)`, where going
// through libuv's pool cost a good part of the write: an async work item, its resource object and
// async hooks per call, and a pool thread woken through the pool's queue. Here a call is handed
// to the thread under one mutex, and its result comes back through a thread-safe function that
// keeps the event loop alive only while a call is pending.
class Lane {
  public:
    explicit Lane(Napi::Env env);
    Lane(const Lane &) = delete;
    Lane &operator=(const Lane &) = delete;
    ~Lane() { stop(); }
    // Main thread: runs w->execute() on the lane's thread, then w->settle() and delete w on the
    // main thread.
    void post(Napi::Env env, Worker *w);
    // Main thread: waits for the call in progress (if any), ends the thread. Idempotent.
    void stop();

  private:
    Worker *take();
    void loop();
    static void call_js(napi_env env, napi_value, void *context, void *data);

    napi_env env_;
    std::mutex m_;
    std::condition_variable cv_;
    Worker *pending_ = nullptr; // under m_
    bool stopping_ = false;     // under m_
    int in_flight_ = 0;         // posted and not yet settled (main thread only)
    napi_threadsafe_function tsfn_ = nullptr;
    std::shared_ptr<TsfnGate> gate_ = std::make_shared<TsfnGate>();
    napi_async_context async_context_ = nullptr;
    Napi::ObjectReference resource_;
    std::thread thread_;
};

// A Database's socket as libuv watches it for the writes event.cc drives from the main thread
// (outbox_write_send / outbox_write_poll). Made at the first such write, it stays started between
// writes, so a run of them costs no epoll_ctl each; it is stopped before another thread uses the
// connection (Worker::hold), closed after a failed write (the socket may be gone) and with the
// handle. Referenced (keeping the process alive) only while a write waits. Main thread only.
class Poller {
  public:
    using Ready = void (*)(void *op);
    Poller() = default;
    Poller(const Poller &) = delete;
    Poller &operator=(const Poller &) = delete;
    ~Poller() { close(); }
    // A write (op) begins on the connection whose socket is fd: false when libuv cannot watch it.
    bool begin(napi_env env, int fd, void *op, Ready ready);
    // Waits for the socket readable (and writable): ready(op) then. False when libuv refused.
    bool wait(bool writable);
    // The write is over (the socket is still watched, but no longer keeps the process alive).
    void end();
    // Not watched any more (another thread uses the connection next); begin() starts again.
    void stop();
    // The handle closed (freed once libuv is done with it); begin() makes a new one.
    void close();

  private:
    friend struct PollerAccess; // event.cc's libuv callback
    ::uv_poll_s *poll_ = nullptr;
    int fd_ = -1;
    int events_ = 0; // what it is started for; 0: stopped
    void *op_ = nullptr;
    Ready ready_ = nullptr;
};

struct HandleBase {
    int busy = 0;                    // pending operations using the handle (main thread only)
    int readers = 0;                 // pending operations only reading it (a configuration being copied)
    std::unique_ptr<LogSink> logger; // relay and consumer
    // Runs before the C object is destroyed while an operation on a thread of our own still uses
    // it (relay_run at environment teardown, when finalizers run regardless of references).
    std::function<void()> before_destroy;
    std::unique_ptr<Lane> lane;     // the thread of a Database's operations (lane_of), stopped before destroy
    std::unique_ptr<Poller> poller; // a Database's socket watched for its writes, closed before destroy
    HandleBase() = default;
    HandleBase(const HandleBase &) = delete;
    HandleBase &operator=(const HandleBase &) = delete;
    virtual ~HandleBase() = default;
};

template <typename T> struct Traits;

#define OUTBOX_NODE_HANDLE(T, NAME, DESTROY, HI, LO)                                                                   \
    template <> struct Traits<T> {                                                                                     \
        static constexpr const char *name = NAME;                                                                      \
        static const napi_type_tag *tag() {                                                                            \
            static const napi_type_tag t = {HI, LO};                                                                   \
            return &t;                                                                                                 \
        }                                                                                                              \
        static void destroy(T *p) { DESTROY(p); }                                                                      \
    };

// Random 128-bit tags, one per handle type.
OUTBOX_NODE_HANDLE(outbox_config, "outbox_config", outbox_config_free, 0x3b0f6a1d9c2e4711ULL, 0xa5d3c0e1f7b24c01ULL)
OUTBOX_NODE_HANDLE(outbox_db, "outbox_db", outbox_db_close, 0x3b0f6a1d9c2e4712ULL, 0x8e61f2a4c9d34c02ULL)
OUTBOX_NODE_HANDLE(outbox_event, "outbox_event", outbox_event_free, 0x3b0f6a1d9c2e4713ULL, 0x1f7e5b3d2a694c03ULL)
OUTBOX_NODE_HANDLE(outbox_statement, "outbox_statement", outbox_statement_free, 0x3b0f6a1d9c2e4714ULL,
                   0xc4a9d6e8b1054c04ULL)
OUTBOX_NODE_HANDLE(outbox_relay, "outbox_relay", outbox_relay_free, 0x3b0f6a1d9c2e4715ULL, 0x72b8e0f6d3a14c05ULL)
OUTBOX_NODE_HANDLE(outbox_consumer, "outbox_consumer", outbox_consumer_free, 0x3b0f6a1d9c2e4716ULL,
                   0xe39c1b7a5f864c06ULL)
OUTBOX_NODE_HANDLE(outbox_message, "outbox_message", outbox_message_free, 0x3b0f6a1d9c2e4717ULL, 0x5d0a8c2e4b174c07ULL)
OUTBOX_NODE_HANDLE(outbox_loop, "outbox_loop", outbox_loop_free, 0x3b0f6a1d9c2e4718ULL, 0x9b46e1c3d7f24c08ULL)

// A write plan and the event it writes (the plan refers to it): freed together.
struct node_write_plan {
    outbox_event *ev = nullptr;
    outbox_write_plan *plan = nullptr;
    bool prepared = false; // the INSERT as a named (prepared) statement
};
inline void node_write_plan_free(node_write_plan *p) {
    if (p != nullptr) {
        outbox_write_plan_free(p->plan);
        outbox_event_free(p->ev);
        delete p;
    }
}
OUTBOX_NODE_HANDLE(node_write_plan, "outbox_write_plan", node_write_plan_free, 0x3b0f6a1d9c2e4719ULL,
                   0x2c7d5e9f1a384c09ULL)
#undef OUTBOX_NODE_HANDLE

template <typename T> struct Handle : HandleBase {
    T *ptr = nullptr;
    explicit Handle(T *p) : ptr(p) {}
    // The C object first (no more log callbacks), then the log sink (HandleBase).
    ~Handle() override { release(); }
    void release() {
        if (lane) {
            lane->stop(); // waits for the call in progress
        }
        poller.reset(); // before the connection (and its socket) goes
        if (before_destroy) {
            auto fn = std::move(before_destroy);
            before_destroy = nullptr;
            fn();
        }
        if (ptr != nullptr) {
            Traits<T>::destroy(ptr);
            ptr = nullptr;
        }
    }
};

// Takes ownership of p: the External's finalizer destroys it unless *_free/*_close did first.
template <typename T> Napi::Value wrap(Napi::Env env, T *p) {
    auto *h = new Handle<T>(p);
    Napi::External<Handle<T>> ext;
    try {
        ext = Napi::External<Handle<T>>::New(env, h, [](Napi::Env, Handle<T> *hh) { delete hh; });
    } catch (...) {
        delete h;
        throw;
    }
    ext.TypeTag(Traits<T>::tag());
    return ext;
}

enum class Use {
    exclusive, // not while a pending operation uses the handle
    read,      // only reads it: fine while pending operations also only read it
    stop,      // relay_stop/consumer_stop: thread-safe in C, so also while busy; closed: no-op
    release    // *_free/*_close: a closed handle is fine (no-op), a busy one is not
};

// The handle behind argument `index`, checked for type, and (unless `use` says otherwise) for
// being open and not busy. Returns nullptr only for Use::release/Use::stop of a closed handle.
template <typename T> Handle<T> *unwrap(const Napi::CallbackInfo &info, size_t index, Use use = Use::exclusive) {
    Napi::Env env = info.Env();
    Napi::Value v = info[index];
    if (!v.IsExternal() || !v.As<Napi::External<void>>().CheckTypeTag(Traits<T>::tag())) {
        throw type_error(env, std::string("argument ") + std::to_string(index + 1) + " must be an " + Traits<T>::name +
                                  " handle");
    }
    auto *h = v.As<Napi::External<Handle<T>>>().Data();
    if (h->ptr == nullptr) {
        if (use == Use::release || use == Use::stop) {
            return nullptr;
        }
        throw argument_error(env, std::string(Traits<T>::name) + " handle is closed");
    }
    if (use == Use::stop) {
        return h;
    }
    if (h->busy > 0 || (use != Use::read && h->readers > 0)) {
        throw argument_error(env, std::string(Traits<T>::name) +
                                      " handle is in use by a pending operation (handles are not thread-safe; "
                                      "wait for it to settle)");
    }
    return h;
}

// An optional handle: null/undefined -> nullptr (the C API's "NULL for the defaults").
template <typename T> Handle<T> *unwrap_opt(const Napi::CallbackInfo &info, size_t index, Use use = Use::read) {
    if (info[index].IsNull() || info[index].IsUndefined()) {
        return nullptr;
    }
    return unwrap<T>(info, index, use);
}

// ---------------------------------------------------------------- arguments

inline std::string str_arg(const Napi::CallbackInfo &info, size_t index, const char *what) {
    if (!info[index].IsString()) {
        throw type_error(info.Env(), std::string(what) + " must be a string");
    }
    return info[index].As<Napi::String>().Utf8Value();
}

// A string, or null/undefined (-> has = false).
inline std::string opt_str_arg(const Napi::CallbackInfo &info, size_t index, const char *what, bool &has) {
    has = !(info[index].IsNull() || info[index].IsUndefined());
    return has ? str_arg(info, index, what) : std::string();
}

inline int64_t int64_of(const Napi::Value &v, const char *what) {
    if (v.IsBigInt()) {
        bool lossless = false;
        int64_t r = v.As<Napi::BigInt>().Int64Value(&lossless);
        if (!lossless) {
            throw type_error(v.Env(), std::string(what) + " is out of the int64 range");
        }
        return r;
    }
    if (!v.IsNumber()) {
        throw type_error(v.Env(), std::string(what) + " must be a number");
    }
    double d = v.As<Napi::Number>().DoubleValue();
    if (!(d >= -9007199254740991.0 && d <= 9007199254740991.0) || d != static_cast<double>(static_cast<int64_t>(d))) {
        throw type_error(v.Env(), std::string(what) + " must be an integer");
    }
    return static_cast<int64_t>(d);
}

inline int64_t int64_arg(const Napi::CallbackInfo &info, size_t index, const char *what) {
    return int64_of(info[index], what);
}

inline Napi::Value str_or_null(Napi::Env env, const char *s) {
    return s != nullptr ? Napi::Value(Napi::String::New(env, s)) : env.Null();
}

// A statement's parameters as an array of strings and nulls.
inline Napi::Array statement_values(Napi::Env env, const outbox_statement *st) {
    const size_t n = outbox_statement_param_count(st);
    Napi::Array out = Napi::Array::New(env, n);
    for (size_t i = 0; i < n; ++i) {
        out.Set(static_cast<uint32_t>(i), str_or_null(env, outbox_statement_param(st, i)));
    }
    return out;
}

// A driver's row (an Array of values, or null) as the text values the library's step machines
// take: data() and size() for outbox_loop_exec_done / outbox_write_plan_done.
class TextRow {
  public:
    explicit TextRow(const Napi::Value &row) {
        if (!row.IsArray()) {
            return;
        }
        Napi::Array a = row.As<Napi::Array>();
        texts_.reserve(a.Length());
        for (uint32_t i = 0; i < a.Length(); ++i) {
            Napi::Value v = a.Get(i);
            const bool null = v.IsNull() || v.IsUndefined();
            texts_.push_back(null ? std::string() : v.ToString().Utf8Value());
            nulls_.push_back(null);
        }
        for (size_t i = 0; i < texts_.size(); ++i) {
            ptrs_.push_back(nulls_[i] ? nullptr : texts_[i].c_str());
        }
    }
    const char *const *data() const { return ptrs_.data(); }
    size_t size() const { return ptrs_.size(); }

  private:
    std::vector<std::string> texts_;
    std::vector<bool> nulls_;
    std::vector<const char *> ptrs_;
};

// ---------------------------------------------------------------- JS values (marshal.cc)

// A statement as a node-postgres query: { text, values, rowMode: 'array' }, named when `prefix`
// is given (prefix_<hash of the text>, from AddonData's StatementNames: node-postgres then prepares
// it once per connection).
Napi::Object pg_query(Napi::Env env, const outbox_statement *st, const char *prefix);

// Sets an event's fields, [C name, value, ...] (node/lib's eventFields: the JSON fields' objects
// as JSON text), on `ev` (outbox_event_set_n): strings and Uint8Arrays as they are, numbers,
// bigints and booleans as text, anything else a TypeError. Every value is checked before any is set.
void set_event(Napi::Env env, outbox_event *ev, const Napi::Value &fields);

// A string, number, bigint (as String() gives them) or boolean ("true", "false") as text; false for
// anything else.
bool scalar_text(const Napi::Value &v, std::string &out);

// The own enumerable string keys of `o`, as Object.keys() gives them.
Napi::Array own_keys(Napi::Env env, const Napi::Object &o);

// exports.fields: camelCase name -> C name of every event field, in the library's order
// (outbox_event_field); exports.json_fields: the C names whose values are JSON.
void export_event_fields(Napi::Env env, Napi::Object exports);

// The transaction state for node-postgres' transaction status (getTransactionStatus()): 'I' idle,
// 'E' aborted; anything else (in a transaction, or a client that cannot say) is taken as in a
// transaction, where the write plan goes on without a savepoint if there is none after all.
outbox_tx_state tx_of(const Napi::Value &status);

// What a node-postgres error says: its SQLSTATE, the constraint it names, its message, and (with
// no SQLSTATE) whether the connection is gone: a network errno, or node-postgres' words for a
// closed or ended client.
struct DriverFailure {
    std::string sqlstate, constraint, message;
    bool closed = false;
    explicit DriverFailure(const Napi::Value &err);
};

// ---------------------------------------------------------------- workers

// An operation whose C call runs on another thread and whose Promise settles on the main thread:
// on a libuv worker thread (start()), or on a Database's own thread (start(Lane &)). Handles passed
// to hold() are kept alive (no finalizer) and marked busy until the operation settles.
class Worker {
  public:
    Worker(Napi::Env env, const char *name) : name_(name), deferred_(Napi::Promise::Deferred::New(env)) {}
    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;
    virtual ~Worker() { unhold(); }

    // read_only: the operation only reads the handle (a configuration the C call copies).
    void hold(const Napi::Value &value, HandleBase *h, bool read_only = false) {
        if (h->poller) {
            h->poller->stop(); // the connection is another thread's now
        }
        refs_.emplace_back(Napi::Persistent(value));
        ++(read_only ? h->readers : h->busy);
        held_.emplace_back(h, read_only);
    }

    // Queues the operation on libuv's thread pool; the worker deletes itself once settled.
    Napi::Promise start();
    // Queues it on `lane`, the thread of the handle it uses (see Lane).
    Napi::Promise start(Napi::Env env, Lane &lane);

    // On the thread that runs it: calls the C function, keeps its status (and message).
    void execute() {
        status_ = run();
        if (status_ != OUTBOX_OK) {
            message_ = outbox_last_error(); // same thread as the call
        }
    }
    // On the main thread, once execute() returned: settles the promise.
    void settle(Napi::Env env) {
        Napi::HandleScope scope(env);
        unhold(); // before any continuation of the promise runs
        if (status_ != OUTBOX_OK) {
            Napi::Error e = status_error(env, status_, message_);
            annotate(e);
            deferred_.Reject(e.Value());
            return;
        }
        try {
            deferred_.Resolve(result(env));
        } catch (const Napi::Error &e) {
            deferred_.Reject(e.Value());
        }
    }
    // On the main thread, when the operation could not run.
    void reject(const Napi::Error &e) {
        unhold();
        deferred_.Reject(e.Value());
    }
    const char *name() const { return name_; }

  protected:
    // On the worker thread: call the C function; return its status.
    virtual outbox_status run() = 0;
    // On the main thread, after success: the value the promise resolves with.
    virtual Napi::Value result(Napi::Env env) { return env.Undefined(); }
    // On the main thread, after a failure: adds details to the error.
    virtual void annotate(Napi::Error &) {}

  private:
    void unhold() {
        for (auto &[h, read_only] : held_) {
            --(read_only ? h->readers : h->busy);
        }
        held_.clear();
        for (auto &r : refs_) {
            r.Reset();
        }
        refs_.clear();
    }

    const char *name_;
    Napi::Promise::Deferred deferred_;
    std::vector<Napi::Reference<Napi::Value>> refs_;
    std::vector<std::pair<HandleBase *, bool>> held_;
    outbox_status status_ = OUTBOX_OK;
    std::string message_;
};

// The lane of a connection the library owns (created at its first operation): the Database's
// operations run there rather than on libuv's pool.
Lane &lane_of(Napi::Env env, Handle<outbox_db> *h);

// Installs a logger (or removes it with fn = null/undefined) on a relay or consumer handle.
template <typename T, typename SetFn> void set_logger(const Napi::CallbackInfo &info, Handle<T> *h, SetFn set) {
    Napi::Env env = info.Env();
    if (info[1].IsNull() || info[1].IsUndefined()) {
        check(env, set(h->ptr, nullptr, nullptr));
        h->logger.reset();
        return;
    }
    if (!info[1].IsFunction()) {
        throw type_error(env, "logger must be a function or null");
    }
    auto sink = std::make_unique<LogSink>();
    auto *fin = new std::shared_ptr<TsfnGate>(sink->gate);
    try {
        sink->tsfn = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "outbox_logger", 0, 1,
                                                   static_cast<void *>(nullptr), TsfnGate::on_finalize, fin);
    } catch (...) {
        delete fin;
        sink->gate->finalized = true; // nothing to release
        throw;
    }
    sink->tsfn.Unref(env); // a logger never keeps the process alive
    struct Item {
        int level;
        std::string message;
    };
    auto cb = [](outbox_log_level level, const char *message, void *user_data) {
        auto *s = static_cast<LogSink *>(user_data);
        std::lock_guard<std::mutex> lock(s->gate->m);
        if (s->gate->finalized) {
            return; // environment gone
        }
        auto *item = new Item{static_cast<int>(level), message != nullptr ? message : ""};
        napi_status st = s->tsfn.NonBlockingCall(item, [](Napi::Env e, Napi::Function fn, Item *it) {
            std::unique_ptr<Item> owned(it);
            if (e == nullptr || fn == nullptr) {
                return;
            }
            try {
                fn.Call(
                    {Napi::String::New(e, name_of(kLogLevels, owned->level)), Napi::String::New(e, owned->message)});
            } catch (const Napi::Error &) {
                // a logger must not break the relay or consumer (or a terminating environment)
            }
        });
        if (st != napi_ok) {
            delete item;
        }
    };
    outbox_status st = set(h->ptr, cb, sink.get());
    if (st != OUTBOX_OK) {
        check(env, st);
    }
    h->logger = std::move(sink); // the old sink (if any) is released here, after the swap
}

// ---------------------------------------------------------------- registration

using Registrar = void (*)(Napi::Env env, Napi::Object exports);
void register_common(Napi::Env env, Napi::Object exports);
void register_config(Napi::Env env, Napi::Object exports);
void register_db(Napi::Env env, Napi::Object exports);
void register_event(Napi::Env env, Napi::Object exports);
void register_relay(Napi::Env env, Napi::Object exports);
void register_consumer(Napi::Env env, Napi::Object exports);
void register_loop(Napi::Env env, Napi::Object exports);
void register_write_plan(Napi::Env env, Napi::Object exports);
void register_parked(Napi::Env env, Napi::Object exports);

inline void def(Napi::Env env, Napi::Object exports, const char *name, Napi::Function::Callback fn) {
    exports.Set(name, Napi::Function::New(env, fn, name));
}

} // namespace outbox_node
