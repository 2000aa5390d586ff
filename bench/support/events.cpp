#include "events.hpp"

namespace bench {

void envelope(std::string &out, const std::string &id, const char *event_type, const std::string &aggregate_id,
              const char *aggregate_type, const char *operation, const std::string &payload, const char *metadata,
              const char *user, const std::string &created_at) {
    out.clear();
    out += "{\"OUTBOX_ID\":\"";
    out += id;
    out += "\",\"EVENT_TYPE\":\"";
    out += event_type;
    out += "\",\"AGGREGATE_ID\":\"";
    out += aggregate_id;
    out += "\",\"AGGREGATE_TYPE\":\"";
    out += aggregate_type;
    out += "\",\"OPERATION\":\"";
    out += operation;
    out += "\",\"PAYLOAD\":";
    out += payload;
    out += ",\"METADATA\":";
    out += metadata;
    out += ",\"USER\":\"";
    out += user;
    out += "\",\"CREATED_AT\":\"";
    out += created_at;
    out += "\"}";
}

void Message::build(const Generator &g, long i) {
    g.id(id, i);
    g.aggregate_id(aggregate_id, i);
    g.payload(payload, i);
    g.created_compact(created, i);
    envelope(body, id, g.event_type(i), aggregate_id, Generator::aggregate_type(), g.operation(i), payload,
             Generator::metadata(), Generator::user(), created);
}

void load_backlog(Pg &pg, const std::string &table, const std::string &aggregates_table, const Generator &g) {
    std::string id, agg, payload, created;
    long i = 0;
    pg.exec("BEGIN");
    pg.copy_in("COPY " + table +
                   " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, metadata, actor,"
                   " created_at, next_attempt_at) FROM STDIN",
               [&](std::string &buf) {
                   if (i >= g.count) {
                       return false;
                   }
                   g.id(id, i);
                   g.aggregate_id(agg, i);
                   g.payload(payload, i);
                   g.created_sql(created, i);
                   buf += id;
                   buf += '\t';
                   buf += g.event_type(i);
                   buf += '\t';
                   buf += Generator::aggregate_type();
                   buf += '\t';
                   buf += agg;
                   buf += '\t';
                   buf += std::to_string(g.seq_of(i));
                   buf += '\t';
                   buf += g.operation(i);
                   buf += '\t';
                   buf += payload;
                   buf += '\t';
                   buf += Generator::metadata();
                   buf += '\t';
                   buf += Generator::user();
                   buf += '\t';
                   buf += created;
                   buf += '\t';
                   buf += created;
                   buf += '\n';
                   ++i;
                   return i < g.count;
               });
    pg.exec("INSERT INTO " + aggregates_table +
            " (aggregate_type, aggregate_id, last_seq) SELECT aggregate_type, aggregate_id, max(seq) FROM " + table +
            " WHERE aggregate_id LIKE '" + std::string(1, g.prefix) +
            "%' GROUP BY 1, 2 ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq ="
            " greatest(EXCLUDED.last_seq, " +
            aggregates_table + ".last_seq)");
    pg.exec("COMMIT");
    // As a backlog that built up over time would be: hint bits set, statistics known, nothing left
    // for a checkpoint to write in the middle of the measurement.
    pg.exec("VACUUM ANALYZE " + table);
    pg.exec("CHECKPOINT");
}

} // namespace bench
