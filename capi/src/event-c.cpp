#include "capi.hpp"

#include <cstring>

using outbox::capi::guard;

extern "C" {

outbox_status outbox_event_new(outbox_event **out) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    return guard([&] { *out = new outbox_event(); });
}

void outbox_event_free(outbox_event *ev) { delete ev; }

outbox_status outbox_event_set(outbox_event *ev, const char *field, const char *value) {
    OUTBOX_REQUIRE(ev);
    OUTBOX_REQUIRE(field);
    OUTBOX_REQUIRE(value);
    return guard([&] { ev->ev.set(field, std::string_view(value, std::strlen(value))); });
}

outbox_status outbox_event_set_n(outbox_event *ev, const char *field, const char *value, size_t len) {
    OUTBOX_REQUIRE(ev);
    OUTBOX_REQUIRE(field);
    if (value == nullptr && len > 0) {
        return outbox::capi::fail_null("value");
    }
    return guard([&] { ev->ev.set(field, std::string_view(value != nullptr ? value : "", len)); });
}

outbox_status outbox_event_unset(outbox_event *ev, const char *field) {
    OUTBOX_REQUIRE(ev);
    OUTBOX_REQUIRE(field);
    return guard([&] { ev->ev.unset(field); });
}

const char *outbox_event_id(const outbox_event *ev) {
    return ev != nullptr && !ev->ev.resolved_id.empty() ? ev->ev.resolved_id.c_str() : nullptr;
}

const char *outbox_event_type(const outbox_event *ev) {
    return ev != nullptr && !ev->ev.resolved_type.empty() ? ev->ev.resolved_type.c_str() : nullptr;
}

int64_t outbox_event_seq(const outbox_event *ev) { return ev != nullptr ? ev->ev.seq : 0; }

outbox_status outbox_write(outbox_db *db, outbox_event *ev) {
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(ev);
    return guard([&] { outbox::store::write(db->conn, db->cfg, ev->ev); });
}

outbox_status outbox_write_send(outbox_write_wait *wait, outbox_db *db, outbox_event *ev) {
    OUTBOX_REQUIRE(wait);
    *wait = OUTBOX_WRITE_DONE;
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(ev);
    return guard([&] { *wait = static_cast<outbox_write_wait>(outbox::store::write_send(db->conn, db->cfg, ev->ev)); });
}

outbox_status outbox_write_poll(outbox_write_wait *wait, outbox_db *db, outbox_event *ev) {
    OUTBOX_REQUIRE(wait);
    *wait = OUTBOX_WRITE_DONE;
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(ev);
    return guard([&] { *wait = static_cast<outbox_write_wait>(outbox::store::write_poll(db->conn, ev->ev)); });
}

outbox_status outbox_render_write(outbox_statement **out, const outbox_config *cfg, outbox_event *ev) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(ev);
    return guard([&] {
        static const outbox::Config defaults;
        const outbox::Config &c = cfg != nullptr ? cfg->cfg : defaults;
        *out = new outbox_statement{outbox::store::render_write(c, ev->ev)};
    });
}

void outbox_statement_free(outbox_statement *st) { delete st; }

const char *outbox_statement_sql(const outbox_statement *st) { return st != nullptr ? st->st.sql.c_str() : nullptr; }

size_t outbox_statement_param_count(const outbox_statement *st) { return st != nullptr ? st->st.params.size() : 0; }

const char *outbox_statement_param(const outbox_statement *st, size_t index) {
    if (st == nullptr || index >= st->st.params.size() || !st->st.params[index]) {
        return nullptr;
    }
    return st->st.params[index]->c_str();
}

outbox_status outbox_statement_json(char **out, const outbox_statement *st) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(st);
    return guard([&] { *out = outbox::capi::dup_string(outbox::store::statement_json(st->st)); });
}

} // extern "C"
