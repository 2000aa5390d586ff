#include "events.hpp"

#include <string_view>

namespace bench {

void envelope(std::string &out, const std::string &id, const char *event_type, const std::string &aggregate_id,
              const char *aggregate_type, const char *operation, const std::string &payload, const char *metadata,
              const char *user, const std::string &created_at) {
    struct Field {
        const char *key;
        std::string_view value;
        bool quoted; // a string; else JSON as it is (PAYLOAD, METADATA)
    };
    const Field fields[] = {{"OUTBOX_ID", id, true},
                            {"EVENT_TYPE", event_type, true},
                            {"AGGREGATE_ID", aggregate_id, true},
                            {"AGGREGATE_TYPE", aggregate_type, true},
                            {"OPERATION", operation, true},
                            {"PAYLOAD", payload, false},
                            {"METADATA", metadata, false},
                            {"USER", user, true},
                            {"CREATED_AT", created_at, true}};
    out.clear();
    char sep = '{';
    for (const Field &f : fields) {
        out += sep;
        out += '"';
        out += f.key;
        out += f.quoted ? "\":\"" : "\":";
        out += f.value;
        if (f.quoted) {
            out += '"';
        }
        sep = ',';
    }
    out += '}';
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
    // Storage version 2: the events table takes a position from the sequence in the order the events
    // were generated. COPY cannot call nextval, so the rows go through a staging table.
    const std::string events = table + "_events";
    const std::string sequence = table + "_position_seq";
    pg.exec("BEGIN");
    pg.exec("CREATE TEMP TABLE IF NOT EXISTS bench_load (n bigserial, outbox_id uuid, event_type text,"
            " aggregate_type text, aggregate_id text, seq bigint, operation text, payload json, metadata json,"
            " actor text, created_at timestamptz, next_attempt_at timestamptz) ON COMMIT DELETE ROWS");
    pg.copy_in("COPY bench_load"
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
                   const std::string seq = std::to_string(g.seq_of(i));
                   const std::string_view columns[] = {
                       id,      g.event_type(i),       Generator::aggregate_type(), agg,     seq,    g.operation(i),
                       payload, Generator::metadata(), Generator::user(),           created, created};
                   for (const std::string_view c : columns) {
                       buf += c;
                       buf += '\t';
                   }
                   buf.back() = '\n';
                   ++i;
                   return i < g.count;
               });
    pg.exec("INSERT INTO " + events +
            " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, metadata,"
            " actor, created_at) SELECT nextval('" + sequence + "'), outbox_id, event_type, aggregate_type,"
            " aggregate_id, seq, operation, payload, metadata, actor, created_at FROM (SELECT * FROM bench_load"
            " ORDER BY n) AS l");
    pg.query("INSERT INTO " + aggregates_table +
                 " (aggregate_type, aggregate_id, last_seq) SELECT aggregate_type, aggregate_id, max(seq) FROM " +
                 events +
                 " WHERE aggregate_id LIKE $1 GROUP BY 1, 2 ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE"
                 " SET last_seq = greatest(EXCLUDED.last_seq, " +
                 aggregates_table + ".last_seq)",
             {std::string(1, g.prefix) + "%"});
    pg.exec("COMMIT");
    // As a backlog that built up over time would be: hint bits set, statistics known, nothing left
    // for a checkpoint to write in the middle of the measurement.
    pg.exec("VACUUM ANALYZE " + events);
    pg.exec("CHECKPOINT");
}

} // namespace bench
