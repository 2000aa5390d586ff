// The marshalling the handle classes of outbox._native share: C statuses to the Python exception
// classes outbox/_errors.py registers, text in both directions, waits that Ctrl-C can interrupt,
// the logging bridge, Config and event fields. Over the public C API (outbox.h) only.
#pragma once

#include <outbox.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace outbox_py {

namespace py = pybind11;
using namespace pybind11::literals;

inline constexpr int slice_ms = 200;

// ----------------------------------------------------------------------------- errors

// status (int) -> exception class; filled by outbox/_errors.py through _set_error_classes().
// Leaked on purpose: it must not be destroyed after the interpreter is gone.
inline py::dict &error_classes() {
    static auto *classes = new py::dict();
    return *classes;
}

struct Failure {
    outbox_status status = OUTBOX_OK;
    std::string message;
    std::string sqlstate;
    explicit operator bool() const { return status != OUTBOX_OK; }
};

// Reads the calling thread's last error; call it right after the failing outbox_* call.
inline Failure failure(outbox_status st) {
    Failure f;
    f.status = st;
    if (st != OUTBOX_OK) {
        f.message = outbox_last_error();
    }
    return f;
}

inline py::str text(const char *s, size_t n) {
    PyObject *o = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(n), "replace");
    if (o == nullptr) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::str>(o);
}
inline py::str text(const std::string &s) {
    return text(s.data(), s.size());
}

[[noreturn]] inline void throw_error(const Failure &f) {
    py::object cls;
    py::int_ key(static_cast<int>(f.status));
    if (error_classes().contains(key)) {
        cls = error_classes()[key];
    } else {
        cls = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
        py::object exc = cls(text(std::string(outbox_status_name(f.status)) + ": " + f.message));
        PyErr_SetObject(cls.ptr(), exc.ptr());
        throw py::error_already_set();
    }
    py::object sqlstate = f.sqlstate.empty() ? py::object(py::none()) : py::object(py::str(f.sqlstate));
    py::object exc = cls(text(f.message), "code"_a = outbox_status_name(f.status),
                         "status"_a = static_cast<int>(f.status), "sqlstate"_a = sqlstate);
    PyErr_SetObject(cls.ptr(), exc.ptr());
    throw py::error_already_set();
}

[[noreturn]] inline void throw_error(outbox_status st, std::string message) {
    Failure f;
    f.status = st;
    f.message = std::move(message);
    throw_error(f);
}

inline void check(const Failure &f) {
    if (f) {
        throw_error(f);
    }
}

// Runs fn with the GIL released and `mu` held (the GIL is always released before a handle's
// mutex is taken, never the other way round, so two threads cannot deadlock on the pair).
template <typename Fn> auto locked(std::mutex &mu, Fn &&fn) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu);
    return fn();
}

// ----------------------------------------------------------------------------- strings

// A Python str's UTF-8 (no copy). NUL bytes pass through: the C API rejects them by length.
inline std::string_view utf8(py::handle o, const char *what) {
    if (!PyUnicode_Check(o.ptr())) {
        throw py::type_error(std::string(what) + " must be a str, not " + std::string(Py_TYPE(o.ptr())->tp_name));
    }
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(o.ptr(), &n);
    if (s == nullptr) {
        PyErr_Clear();
        throw_error(OUTBOX_ERR_INVALID_EVENT, std::string(what) + " is not valid UTF-8 (it holds a lone surrogate)");
    }
    return {s, static_cast<size_t>(n)};
}

// A C string from a Python str, refusing NUL (C APIs that take const char* would truncate).
inline std::string cstr(py::handle o, const char *what) {
    std::string_view v = utf8(o, what);
    if (v.find('\0') != std::string_view::npos) {
        throw_error(OUTBOX_ERR_INVALID_ARGUMENT, std::string(what) + " contains a NUL byte");
    }
    return std::string(v);
}

// A std::string argument handed to a C API as const char*: a NUL would silently truncate it.
inline const std::string &no_nul(const std::string &s, const char *what) {
    if (s.find('\0') != std::string::npos) {
        throw_error(OUTBOX_ERR_INVALID_ARGUMENT, std::string(what) + " contains a NUL byte");
    }
    return s;
}

inline py::object opt_str(const char *s) {
    return s != nullptr ? py::object(text(s, std::strlen(s))) : py::object(py::none());
}

// ----------------------------------------------------------------------------- interruptible waits

// Runs `body` (returning a Failure captured on its own thread) on a worker thread, and waits for
// it in slices with the GIL released; between slices, pending signal handlers run. When one
// raises (Ctrl-C: KeyboardInterrupt), `stop` asks the body to finish what is in flight, the
// worker is joined, and the exception propagates. Off the main thread (no signals there), the
// body simply runs on the calling thread.
inline Failure interruptible(bool on_main_thread, const std::function<Failure()> &body,
                             const std::function<void()> &stop) {
    if (!on_main_thread) {
        py::gil_scoped_release nogil;
        return body();
    }
    struct Shared {
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
        Failure result;
    };
    auto shared = std::make_shared<Shared>();
    std::thread worker([shared, body] {
        Failure f = body();
        std::lock_guard<std::mutex> lk(shared->m);
        shared->result = std::move(f);
        shared->done = true;
        shared->cv.notify_all();
    });
    while (true) {
        bool done = false;
        {
            py::gil_scoped_release nogil;
            std::unique_lock<std::mutex> lk(shared->m);
            done = shared->cv.wait_for(lk, std::chrono::milliseconds(slice_ms), [&] { return shared->done; });
        }
        if (done) {
            break;
        }
        if (PyErr_CheckSignals() != 0) {
            stop();
            {
                py::gil_scoped_release nogil;
                worker.join();
            }
            throw py::error_already_set();
        }
    }
    {
        py::gil_scoped_release nogil;
        worker.join();
    }
    std::lock_guard<std::mutex> lk(shared->m);
    return shared->result;
}

// ----------------------------------------------------------------------------- logging

// A Python callable(level: int, message: str) behind outbox_log_fn; called on whichever thread
// runs the relay or consumer, so it takes the GIL itself.
struct LogSink {
    py::object fn;
    static void call(outbox_log_level level, const char *message, void *user_data) {
        auto *sink = static_cast<LogSink *>(user_data);
        if (sink == nullptr || !Py_IsInitialized()) {
            return;
        }
        py::gil_scoped_acquire gil;
        try {
            sink->fn(static_cast<int>(level), text(message, std::strlen(message)));
        } catch (py::error_already_set &e) {
            e.discard_as_unraisable("outbox log handler");
        } catch (const std::exception &) {
        }
    }
};

// ----------------------------------------------------------------------------- Config

class Config {
  public:
    Config() { check(failure(outbox_config_new(&h_))); }
    ~Config() { outbox_config_free(h_); }
    Config(const Config &) = delete;
    Config &operator=(const Config &) = delete;

    void set(py::handle key, py::handle value) {
        std::string k = cstr(key, "configuration key");
        std::string v = cstr(value, "configuration value");
        check(failure(outbox_config_set(h_, k.c_str(), v.c_str())));
    }
    py::str get(py::handle key) const {
        std::string k = cstr(key, "configuration key");
        char *out = nullptr;
        Failure f = failure(outbox_config_get(&out, h_, k.c_str()));
        check(f);
        py::str s = text(out, std::strlen(out));
        outbox_string_free(out);
        return s;
    }
    void from_env(bool overwrite) { check(failure(outbox_config_from_env(h_, overwrite ? 1 : 0))); }
    static py::list keys() {
        py::list out;
        for (size_t i = 0;; ++i) {
            const char *key = nullptr;
            const char *help = nullptr;
            if (outbox_config_key(&key, &help, i) != OUTBOX_OK) {
                break;
            }
            out.append(py::make_tuple(opt_str(key), opt_str(help)));
        }
        return out;
    }
    const outbox_config *get_handle() const { return h_; }

  private:
    outbox_config *h_ = nullptr;
};

inline const outbox_config *cfg_of(const Config *c) {
    return c != nullptr ? c->get_handle() : nullptr;
}

// ----------------------------------------------------------------------------- events

// The event fields, in the order the C API enumerates them (outbox_event_field()); the Python
// layer builds its tuples from the same enumeration (_native.event_fields()).
inline const std::vector<std::pair<const char *, int>> &event_field_list() {
    static const std::vector<std::pair<const char *, int>> fields = [] {
        std::vector<std::pair<const char *, int>> v;
        const char *name = nullptr;
        outbox_field_kind kind = OUTBOX_FIELD_TEXT;
        for (size_t i = 0; outbox_event_field(&name, &kind, i) == OUTBOX_OK; ++i) {
            v.emplace_back(name, static_cast<int>(kind));
        }
        return v;
    }();
    return fields;
}

struct EventHandle {
    outbox_event *p = nullptr;
    EventHandle() { check(failure(outbox_event_new(&p))); }
    ~EventHandle() { outbox_event_free(p); }
    EventHandle(const EventHandle &) = delete;
    EventHandle &operator=(const EventHandle &) = delete;
};

// Fills an event from a tuple of str-or-None (force_delete: bool). GIL held: setters do not block.
inline void fill_event(outbox_event *ev, const py::tuple &fields) {
    const auto &names = event_field_list();
    if (fields.size() != names.size()) {
        throw py::value_error("event fields: expected a tuple of " + std::to_string(names.size()));
    }
    for (size_t i = 0; i < names.size(); ++i) {
        py::handle v = fields[i];
        const char *field = names[i].first;
        if (v.is_none()) {
            continue;
        }
        if (PyBool_Check(v.ptr())) {
            const char *b = v.ptr() == Py_True ? "true" : "false";
            check(failure(outbox_event_set(ev, field, b)));
            continue;
        }
        std::string_view s = utf8(v, field);
        check(failure(outbox_event_set_n(ev, field, s.data(), s.size())));
    }
}

// A driver's row (a sequence of values, or None) as the text values the library's step machines
// take: data() and size() for outbox_loop_exec_done / outbox_write_plan_done.
class TextRow {
  public:
    explicit TextRow(const py::object &row) {
        if (row.is_none()) {
            return;
        }
        for (py::handle v : row) {
            nulls_.push_back(v.is_none());
            texts_.emplace_back(v.is_none() ? std::string() : py::str(v).cast<std::string>());
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

inline py::tuple written(const outbox_event *ev) {
    return py::make_tuple(opt_str(outbox_event_id(ev)), opt_str(outbox_event_type(ev)), outbox_event_seq(ev));
}

// (sql, params): params a tuple for the positional placeholder styles, a dict by parameter name
// (outbox_statement_param_name()) for the named ones.
inline py::tuple statement_tuple(outbox_statement *st) {
    const size_t n = outbox_statement_param_count(st);
    if (n > 0 && outbox_statement_param_name(st, 0) != nullptr) {
        py::dict named;
        for (size_t i = 0; i < n; ++i) {
            named[py::str(outbox_statement_param_name(st, i))] = opt_str(outbox_statement_param(st, i));
        }
        return py::make_tuple(opt_str(outbox_statement_sql(st)), named);
    }
    py::list params;
    for (size_t i = 0; i < n; ++i) {
        params.append(opt_str(outbox_statement_param(st, i)));
    }
    return py::make_tuple(opt_str(outbox_statement_sql(st)), py::tuple(params));
}

} // namespace outbox_py
