// The write of one event on a node-postgres client, step by step (outbox_write_plan_*), which
// node/lib/outbox.js drives. Only marshalling here; the event lives with the plan.
#include "common.h"

namespace outbox_node {
namespace {

// The statement to run next as a node-postgres query (the INSERT named when prepared), or null
// when the plan is done.
Napi::Value next_of(Napi::Env env, const node_write_plan *wp) {
    int step = 0;
    const outbox_statement *st = outbox_write_plan_next(wp->plan, &step);
    if (st == nullptr) {
        return env.Null();
    }
    return pg_query(env, st, wp->prepared && step == OUTBOX_WRITE_INSERT ? "outbox_write" : nullptr);
}

// write_plan_new(cfg | null, [field, value, ...], pg transaction status, prepared) -> {plan, eventId, eventType, next}
Napi::Value WritePlanNew(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    auto *wp = new node_write_plan();
    Napi::Value handle = wrap(env, wp); // frees the event and the plan, whatever happens next
    check(env, outbox_event_new(&wp->ev));
    set_event(env, wp->ev, info[1]);
    wp->prepared = info[3].ToBoolean();
    check(env, outbox_write_plan_new(&wp->plan, cfg != nullptr ? cfg->ptr : nullptr, wp->ev, tx_of(info[2]), "dollar"));
    Napi::Object o = Napi::Object::New(env);
    o.Set("plan", handle);
    o.Set("eventId", str_or_null(env, outbox_event_id(wp->ev)));
    o.Set("eventType", str_or_null(env, outbox_event_type(wp->ev)));
    o.Set("next", next_of(env, wp));
    return o;
}

// write_plan_done(plan, row | undefined) -> next | null
Napi::Value WritePlanDone(const Napi::CallbackInfo &info) {
    auto *h = unwrap<node_write_plan>(info, 0);
    const TextRow row(info[1]);
    check(info.Env(), outbox_write_plan_done(h->ptr->plan, row.data(), row.size()));
    return next_of(info.Env(), h->ptr);
}

// write_plan_failed(plan, error of node-postgres) -> next | null
Napi::Value WritePlanFailed(const Napi::CallbackInfo &info) {
    auto *h = unwrap<node_write_plan>(info, 0);
    const DriverFailure f(info[1]);
    check(info.Env(), outbox_write_plan_failed(h->ptr->plan, f.sqlstate.c_str(), f.constraint.c_str(),
                                               f.message.c_str(), f.closed ? 1 : 0));
    return next_of(info.Env(), h->ptr);
}

// write_plan_result(plan, cause?) -> seq; throws the error the write ended with, its `cause` the
// driver's last error when given. Frees the plan.
Napi::Value WritePlanResult(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *h = unwrap<node_write_plan>(info, 0);
    const outbox_status st = outbox_write_plan_result(h->ptr->plan);
    const int64_t seq = outbox_event_seq(h->ptr->ev);
    h->release(); // the error stays in outbox_last_error()
    if (st != OUTBOX_OK) {
        Napi::Error e = status_error(env, st, outbox_last_error());
        if (!info[1].IsUndefined()) {
            e.Set("cause", info[1]);
        }
        throw e;
    }
    return Napi::Number::New(env, static_cast<double>(seq));
}

} // namespace

void register_write_plan(Napi::Env env, Napi::Object exports) {
    def(env, exports, "write_plan_new", WritePlanNew);
    def(env, exports, "write_plan_done", WritePlanDone);
    def(env, exports, "write_plan_failed", WritePlanFailed);
    def(env, exports, "write_plan_result", WritePlanResult);
}

} // namespace outbox_node
