// outbox._native.WritePlan: outbox_write_plan_*, the write of one event on a driver's own
// connection, which the package's blocking and asyncio writes drive (python/outbox/_drivers.py).
// Only marshalling here.
#pragma once

#include "marshal.hpp"

namespace outbox_py {

class WritePlan {
  public:
    WritePlan(py::object cfg, const py::tuple &fields, int tx, const std::string &placeholders) : cfg_(std::move(cfg)) {
        fill_event(ev_.p, fields);
        const Config *c = cfg_.is_none() ? nullptr : &cfg_.cast<const Config &>();
        check(failure(
            outbox_write_plan_new(&h_, cfg_of(c), ev_.p, static_cast<outbox_tx_state>(tx), placeholders.c_str())));
    }
    ~WritePlan() { outbox_write_plan_free(h_); }
    WritePlan(const WritePlan &) = delete;
    WritePlan &operator=(const WritePlan &) = delete;

    // (step, sql, params), or None when done.
    py::object next() const {
        int step = 0;
        const outbox_statement *st = outbox_write_plan_next(h_, &step);
        if (st == nullptr) {
            return py::none();
        }
        py::tuple t = statement_tuple(const_cast<outbox_statement *>(st));
        return py::make_tuple(step, t[0], t[1]);
    }
    void done(const py::object &row) {
        const TextRow values(row);
        check(failure(outbox_write_plan_done(h_, values.data(), values.size())));
    }
    void failed(const py::object &sqlstate, const py::object &constraint, const std::string &message, bool closed) {
        const std::string ss = sqlstate.is_none() ? std::string() : py::str(sqlstate).cast<std::string>();
        const std::string cn = constraint.is_none() ? std::string() : py::str(constraint).cast<std::string>();
        check(failure(outbox_write_plan_failed(h_, ss.c_str(), cn.c_str(), message.c_str(), closed ? 1 : 0)));
    }
    // (event_id, event_type, seq); raises the error the write ended with.
    py::tuple result() const {
        check(failure(outbox_write_plan_result(h_)));
        return written(ev_.p);
    }

  private:
    py::object cfg_; // the configuration outlives the plan
    EventHandle ev_;
    outbox_write_plan *h_ = nullptr;
};

inline void register_write_plan(py::module_ &m) {
    using namespace pybind11::literals;
    py::class_<WritePlan>(m, "WritePlan")
        .def(py::init<py::object, const py::tuple &, int, const std::string &>(), "config"_a, "fields"_a, "tx"_a,
             "placeholders"_a)
        .def("next", &WritePlan::next)
        .def("done", &WritePlan::done, "row"_a)
        .def("failed", &WritePlan::failed, "sqlstate"_a, "constraint"_a, "message"_a, "closed"_a)
        .def("result", &WritePlan::result);
}

} // namespace outbox_py
