// The C face of the rules the bindings share: event fields, parameter names, the SQLSTATE
// classification, the idempotency index, the environment's URLs. Each reads core.
#include "capi.hpp"

#include "schema.hpp"

#include <string_view>

using outbox::capi::guard;

extern "C" {

outbox_status outbox_event_field(const char **name, outbox_field_kind *kind, size_t index) {
    return guard([&] {
        const auto &fields = outbox::event_fields();
        if (index >= fields.size()) {
            outbox::fail(outbox::Errc::not_found, "no event field at index " + std::to_string(index));
        }
        if (name != nullptr) {
            *name = fields[index].name;
        }
        if (kind != nullptr) {
            *kind = static_cast<outbox_field_kind>(static_cast<int>(fields[index].kind));
        }
    });
}

outbox_status outbox_envelope_field(const char **name, outbox_field_kind *kind, size_t index) {
    return guard([&] {
        const auto &fields = outbox::envelope_fields();
        if (index >= fields.size()) {
            outbox::fail(outbox::Errc::not_found, "no envelope field at index " + std::to_string(index));
        }
        if (name != nullptr) {
            *name = fields[index].name;
        }
        if (kind != nullptr) {
            *kind = static_cast<outbox_field_kind>(static_cast<int>(fields[index].kind));
        }
    });
}

const char *outbox_statement_param_name(const outbox_statement *st, size_t index) {
    return st != nullptr && index < st->st.names.size() ? st->st.names[index].c_str() : nullptr;
}

outbox_status outbox_status_for_sqlstate(const char *sqlstate) {
    const auto code = outbox::pg::errc_for_sqlstate(sqlstate != nullptr ? std::string_view(sqlstate) : "");
    return static_cast<outbox_status>(static_cast<int>(code));
}

outbox_status outbox_driver_error(const char *context, const char *sqlstate, const char *message,
                                  int connection_closed) {
    return guard([&] {
        throw outbox::pg::driver_error(context != nullptr && *context != '\0' ? context : "outbox",
                                       sqlstate != nullptr ? sqlstate : "", message != nullptr ? message : "",
                                       connection_closed != 0);
    });
}

outbox_status outbox_idempotency_index(char **out, const outbox_config *cfg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    return guard([&] {
        static const outbox::Config defaults;
        *out = outbox::capi::dup_string(outbox::schema::idempotency_index(cfg != nullptr ? cfg->cfg : defaults));
    });
}

outbox_status outbox_db_open_config(outbox_db **out, const outbox_config *cfg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(cfg);
    return guard([&] {
        cfg->cfg.require_pg_url("outbox");
        auto conn = outbox::pg::Conn::open(cfg->cfg.pg_url, cfg->cfg.pg_connect_timeout_s);
        *out = new outbox_db{std::move(conn), cfg->cfg};
    });
}

outbox_status outbox_config_from_env(outbox_config *cfg, int overwrite) {
    OUTBOX_REQUIRE(cfg);
    return guard([&] { cfg->cfg.apply_env(overwrite != 0); });
}

} // extern "C"
