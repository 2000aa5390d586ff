/* Generated from outbox.h for FFI loaders (PHP FFI::cdef). Do not edit. */


const char *outbox_version(void);

int outbox_version_number(void);

typedef enum outbox_status {
    OUTBOX_OK = 0,
    OUTBOX_ERR_INVALID_ARGUMENT = -1, 
    OUTBOX_ERR_INVALID_EVENT = -2,    
    OUTBOX_ERR_TOO_LARGE = -3,        
    OUTBOX_ERR_DUPLICATE = -4,        
    OUTBOX_ERR_DATABASE = -5,         
    OUTBOX_ERR_CONNECTION = -6,       
    OUTBOX_ERR_BROKER = -7,           
    OUTBOX_ERR_TIMEOUT = -8,          
    OUTBOX_ERR_SCHEMA = -9,           
    OUTBOX_ERR_TRANSACTION = -10,     
    OUTBOX_ERR_NO_MEMORY = -11,
    OUTBOX_ERR_STOPPED = -12,         
    OUTBOX_ERR_INTERNAL = -13,
    OUTBOX_ERR_UNKNOWN_KEY = -14,     
    OUTBOX_ERR_NOT_FOUND = -15
} outbox_status;

const char *outbox_last_error(void);

outbox_status outbox_last_status(void);

const char *outbox_last_sqlstate(void);

const char *outbox_status_name(outbox_status status);

int outbox_status_retriable(outbox_status status);

void outbox_string_free(char *s);

typedef struct outbox_config outbox_config;

outbox_status outbox_config_new(outbox_config **out);

void outbox_config_free(outbox_config *cfg);

outbox_status outbox_config_set(outbox_config *cfg, const char *key, const char *value);

outbox_status outbox_config_get(char **out, const outbox_config *cfg, const char *key);

outbox_status outbox_config_key(const char **key, const char **help, size_t index);

typedef struct outbox_db outbox_db;

outbox_status outbox_db_open(outbox_db **out, const char *conninfo, const outbox_config *cfg);

outbox_status outbox_db_wrap(outbox_db **out, void *pgconn, const outbox_config *cfg);

void outbox_db_close(outbox_db *db);

void *outbox_db_pgconn(outbox_db *db);

outbox_status outbox_db_exec(outbox_db *db, const char *sql);

typedef struct outbox_rows outbox_rows;

outbox_status outbox_db_query(outbox_rows **out, outbox_db *db, const char *sql, const char *const *params,
                                         size_t nparams);

void outbox_rows_free(outbox_rows *rows);

size_t outbox_rows_count(const outbox_rows *rows);

size_t outbox_rows_columns(const outbox_rows *rows);

const char *outbox_rows_value(const outbox_rows *rows, size_t row, size_t col, size_t *len);

int64_t outbox_rows_affected(const outbox_rows *rows);

const char *outbox_rows_command(const outbox_rows *rows);

int outbox_libpq_version(void);

typedef enum outbox_tx_state {
    OUTBOX_TX_IDLE = 0,     
    OUTBOX_TX_ACTIVE = 1,   
    OUTBOX_TX_INTRANS = 2,  
    OUTBOX_TX_INERROR = 3,  
    OUTBOX_TX_UNKNOWN = 4   
} outbox_tx_state;

outbox_tx_state outbox_db_tx_state(outbox_db *db);

typedef enum outbox_migrate_target {
    OUTBOX_MIGRATE_ALL = 0,
    OUTBOX_MIGRATE_OUTBOX = 1, 
    OUTBOX_MIGRATE_INBOX = 2   
} outbox_migrate_target;

outbox_status outbox_migrate(int *version, outbox_db *db, outbox_migrate_target target);

typedef struct outbox_event outbox_event;

outbox_status outbox_event_new(outbox_event **out);

void outbox_event_free(outbox_event *ev);

outbox_status outbox_event_set(outbox_event *ev, const char *field, const char *value);

outbox_status outbox_event_set_n(outbox_event *ev, const char *field, const char *value, size_t len);

outbox_status outbox_event_unset(outbox_event *ev, const char *field);

const char *outbox_event_id(const outbox_event *ev);

const char *outbox_event_type(const outbox_event *ev);

int64_t outbox_event_seq(const outbox_event *ev);

outbox_status outbox_write(outbox_db *db, outbox_event *ev);

int outbox_db_socket(const outbox_db *db);

typedef enum outbox_write_wait {
    OUTBOX_WRITE_DONE = 0,     
    OUTBOX_WRITE_READABLE = 1, 
    OUTBOX_WRITE_WRITABLE = 2, 
    OUTBOX_WRITE_BLOCKING = 3  
} outbox_write_wait;

outbox_status outbox_write_send(outbox_write_wait *wait, outbox_db *db, outbox_event *ev);

outbox_status outbox_write_poll(outbox_write_wait *wait, outbox_db *db, outbox_event *ev);

typedef struct outbox_statement outbox_statement;

outbox_status outbox_render_write(outbox_statement **out, const outbox_config *cfg, outbox_event *ev);

void outbox_statement_free(outbox_statement *st);

const char *outbox_statement_sql(const outbox_statement *st);

size_t outbox_statement_param_count(const outbox_statement *st);

const char *outbox_statement_param(const outbox_statement *st, size_t index);

outbox_status outbox_statement_json(char **out, const outbox_statement *st);

typedef struct outbox_relay outbox_relay;

typedef struct outbox_relay_stats {
    size_t size;
    int64_t claimed;     
    int64_t published;   
    int64_t failed;      
    int64_t dead;        
    int64_t held_back;   
    int64_t unroutable;  
    int64_t nacked;      
    int64_t unconfirmed; 
    int64_t claim_us;    
    int64_t publish_us;  
    int64_t mark_us;     
    int64_t total_us;
    int32_t blocked;     
} outbox_relay_stats;

typedef enum outbox_log_level {
    OUTBOX_LOG_DEBUG = 0,
    OUTBOX_LOG_INFO = 1,
    OUTBOX_LOG_WARN = 2,
    OUTBOX_LOG_ERROR = 3
} outbox_log_level;

typedef void (*outbox_log_fn)(outbox_log_level level, const char *message, void *user_data);

outbox_status outbox_relay_new(outbox_relay **out, const outbox_config *cfg);

void outbox_relay_free(outbox_relay *relay);

outbox_status outbox_relay_set_logger(outbox_relay *relay, outbox_log_fn fn, void *user_data);

outbox_status outbox_relay_step(outbox_relay *relay, outbox_relay_stats *stats);

outbox_status outbox_relay_settle(outbox_relay *relay, outbox_relay_stats *stats);

outbox_status outbox_relay_run(outbox_relay *relay);

void outbox_relay_stop(outbox_relay *relay);

outbox_status outbox_relay_reset(outbox_relay *relay);

typedef struct outbox_relay_step_info {
    size_t size;
    outbox_status status;            
    const char *error;               
    const outbox_relay_stats *stats; 
    int32_t pg_up;                   
    int32_t amqp_up;                 
    const char *amqp_node;           
    int64_t retry_in_ms;             
} outbox_relay_step_info;

typedef void (*outbox_relay_step_fn)(const outbox_relay_step_info *info, void *user_data);

outbox_status outbox_relay_set_step_callback(outbox_relay *relay, outbox_relay_step_fn fn, void *user_data);

typedef struct outbox_dedupe_result {
    size_t size;
    int32_t first_time;   
    int32_t order;        
    int64_t previous_seq; 
} outbox_dedupe_result;

typedef enum outbox_order {
    OUTBOX_ORDER_UNCHECKED = 0, 
    OUTBOX_ORDER_IN_ORDER = 1,  
    OUTBOX_ORDER_STALE = 2,     
    OUTBOX_ORDER_GAP = 3        
} outbox_order;

outbox_status outbox_consumer_dedupe(outbox_dedupe_result *out, outbox_db *db, const char *consumer,
                                                const char *event_id, const char *aggregate_type,
                                                const char *aggregate_id, int64_t seq);

outbox_status outbox_render_dedupe(outbox_statement **out, const outbox_config *cfg, const char *consumer,
                                              const char *event_id, const char *aggregate_type,
                                              const char *aggregate_id, int64_t seq);

outbox_status outbox_dedupe_interpret(outbox_dedupe_result *out, const outbox_config *cfg,
                                                 const char *aggregate_type, const char *aggregate_id, int64_t seq,
                                                 int first_time, int64_t previous_seq);

outbox_status outbox_dedupe_interpret_row(outbox_dedupe_result *out, const outbox_config *cfg,
                                                     const char *aggregate_type, const char *aggregate_id,
                                                     int64_t seq, const char *first_time, const char *previous_seq);

outbox_status outbox_inbox_purge(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch);

typedef struct outbox_consumer outbox_consumer;

typedef struct outbox_message outbox_message;

outbox_status outbox_consumer_new(outbox_consumer **out, const outbox_config *cfg, const char *name);

void outbox_consumer_free(outbox_consumer *consumer);

outbox_status outbox_consumer_connect(outbox_consumer *consumer);

outbox_status outbox_consumer_next(outbox_message **out, outbox_consumer *consumer, int timeout_ms);

outbox_status outbox_consumer_ack(outbox_consumer *consumer, const outbox_message *msg);

outbox_status outbox_consumer_nack(outbox_consumer *consumer, const outbox_message *msg, int requeue);

outbox_status outbox_consumer_dead_letter(outbox_consumer *consumer, const outbox_message *msg,
                                                     const char *reason);

outbox_status outbox_consumer_dedupe_message(outbox_dedupe_result *out, outbox_db *db,
                                                        const outbox_consumer *consumer, const outbox_message *msg);

outbox_status outbox_consumer_begin(outbox_dedupe_result *out, outbox_db *db,
                                               const outbox_consumer *consumer, const outbox_message *msg);

typedef int (*outbox_handler_fn)(outbox_db *tx, const outbox_message *msg, void *user_data);

void outbox_handler_error(const char *reason);

outbox_status outbox_consumer_run(outbox_consumer *consumer, outbox_db *db, outbox_handler_fn fn,
                                             void *user_data);

void outbox_consumer_stop(outbox_consumer *consumer);

outbox_status outbox_consumer_reset(outbox_consumer *consumer);

outbox_status outbox_consumer_set_logger(outbox_consumer *consumer, outbox_log_fn fn, void *user_data);

typedef enum outbox_outcome {
    OUTBOX_OUTCOME_HANDLED = 0,        
    OUTBOX_OUTCOME_DUPLICATE = 1,      
    OUTBOX_OUTCOME_HANDLER_FAILED = 2, 
    OUTBOX_OUTCOME_NOT_PROCESSED = 3,  
    OUTBOX_OUTCOME_HELD = 4            
} outbox_outcome;

typedef enum outbox_settle_action {
    OUTBOX_SETTLED_ACKED = 1,        
    OUTBOX_SETTLED_REQUEUED = 2,     
    OUTBOX_SETTLED_DEAD_LETTERED = 3 
} outbox_settle_action;

typedef struct outbox_settled {
    size_t size;
    int32_t action;  
    int32_t db_lost; 
    int64_t attempt; 
} outbox_settled;

outbox_status outbox_consumer_settle(outbox_settled *out, outbox_consumer *consumer,
                                                const outbox_message *msg, outbox_db *db, outbox_outcome outcome,
                                                const char *reason);

outbox_status outbox_consumer_retry_delay(int *delay_ms, outbox_consumer *consumer, int failures,
                                                     const char *why);

typedef struct outbox_loop outbox_loop;

typedef enum outbox_loop_action {
    OUTBOX_LOOP_BLOCK = 1,  
    OUTBOX_LOOP_EXEC = 2,   
    OUTBOX_LOOP_HANDLE = 3, 
    OUTBOX_LOOP_WAIT = 4,   
    OUTBOX_LOOP_OPEN = 5,   
    OUTBOX_LOOP_DONE = 6    
} outbox_loop_action;

typedef enum outbox_loop_sql {
    OUTBOX_LOOP_SQL_BEGIN = 1,   
    OUTBOX_LOOP_SQL_DEDUPE = 2,  
    OUTBOX_LOOP_SQL_COMMIT = 3,  
    OUTBOX_LOOP_SQL_ROLLBACK = 4, 
    OUTBOX_LOOP_SQL_STATEMENT = 5 
} outbox_loop_sql;

const char *outbox_loop_sql_text(outbox_loop_sql kind);

typedef enum outbox_loop_conn {
    OUTBOX_LOOP_LIBRARY = 0,      
    OUTBOX_LOOP_DRIVER_LENT = 2,  
    OUTBOX_LOOP_DRIVER_OWNED = 3  
} outbox_loop_conn;

typedef enum outbox_handler_result {
    OUTBOX_HANDLER_OK = 0,       
    OUTBOX_HANDLER_FAILED = 1,   
    OUTBOX_HANDLER_PERMANENT = 2 
} outbox_handler_result;

typedef struct outbox_loop_options {
    size_t size;
    int32_t connection;       
    int32_t idle_timeout_ms;  
    int64_t limit;            
    const char *placeholders; 
    int32_t slice_ms;         
} outbox_loop_options;

outbox_status outbox_loop_new(outbox_loop **out, outbox_consumer *consumer, outbox_db *db,
                                         const outbox_loop_options *options);

void outbox_loop_free(outbox_loop *loop);

outbox_loop_action outbox_loop_next(outbox_loop *loop);

outbox_status outbox_loop_block(outbox_loop *loop);

const outbox_statement *outbox_loop_statement(const outbox_loop *loop, int *kind);

outbox_status outbox_loop_exec_done(outbox_loop *loop, const char *const *row, size_t columns);

outbox_status outbox_loop_exec_failed(outbox_loop *loop, const char *sqlstate, const char *message,
                                                 int connection_closed);

const outbox_message *outbox_loop_message(outbox_loop *loop);

outbox_db *outbox_loop_db(outbox_loop *loop);

outbox_status outbox_loop_handler_done(outbox_loop *loop, int result, const char *reason);

int outbox_loop_wait_ms(const outbox_loop *loop);

outbox_status outbox_loop_waited(outbox_loop *loop);

outbox_status outbox_loop_opened(outbox_loop *loop, int ok, const char *message);

outbox_status outbox_loop_abort(outbox_loop *loop, const char *reason);

outbox_status outbox_loop_result(const outbox_loop *loop, int64_t *handled);

outbox_status outbox_message_copy(outbox_message **out, const outbox_message *msg);

void outbox_message_free(outbox_message *msg);

const char *outbox_message_field(const outbox_message *msg, const char *name);

const char *outbox_message_body(const outbox_message *msg, size_t *len);

const char *outbox_message_property(const outbox_message *msg, const char *name);

int64_t outbox_message_seq(const outbox_message *msg);

int outbox_message_redelivered(const outbox_message *msg);

int64_t outbox_message_delivery_count(const outbox_message *msg);

outbox_order outbox_message_order(const outbox_message *msg);

int64_t outbox_message_previous_seq(const outbox_message *msg);

typedef enum outbox_field_kind {
    OUTBOX_FIELD_TEXT = 0, 
    OUTBOX_FIELD_JSON = 1, 
    OUTBOX_FIELD_FLAG = 2  
} outbox_field_kind;

outbox_status outbox_event_field(const char **name, outbox_field_kind *kind, size_t index);

outbox_status outbox_envelope_field(const char **name, outbox_field_kind *kind, size_t index);

const char *outbox_statement_param_name(const outbox_statement *st, size_t index);

typedef struct outbox_write_plan outbox_write_plan;

typedef enum outbox_write_step {
    OUTBOX_WRITE_SAVEPOINT = 1,   
    OUTBOX_WRITE_INSERT = 2,      
    OUTBOX_WRITE_RELEASE = 3,     
    OUTBOX_WRITE_ROLLBACK_TO = 4, 
    OUTBOX_WRITE_LOOKUP = 5       
} outbox_write_step;

outbox_status outbox_write_plan_new(outbox_write_plan **out, const outbox_config *cfg, outbox_event *ev,
                                               outbox_tx_state tx, const char *placeholders);

void outbox_write_plan_free(outbox_write_plan *plan);

const outbox_statement *outbox_write_plan_next(const outbox_write_plan *plan, int *step);

outbox_status outbox_write_plan_done(outbox_write_plan *plan, const char *const *row, size_t columns);

outbox_status outbox_write_plan_failed(outbox_write_plan *plan, const char *sqlstate, const char *constraint,
                                                  const char *message, int connection_closed);

outbox_status outbox_write_plan_result(const outbox_write_plan *plan);

outbox_status outbox_status_for_sqlstate(const char *sqlstate);

outbox_status outbox_driver_error(const char *context, const char *sqlstate, const char *message,
                                             int connection_closed);

outbox_status outbox_idempotency_index(char **out, const outbox_config *cfg);

outbox_status outbox_db_open_config(outbox_db **out, const outbox_config *cfg);

outbox_status outbox_config_from_env(outbox_config *cfg, int overwrite);

outbox_status outbox_stats(char **json_out, outbox_db *db);

outbox_status outbox_retry_failed(int64_t *moved, outbox_db *db, const char *aggregate_type,
                                             const char *event_id, int max_retries);

outbox_status outbox_purge_published(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch);

outbox_status outbox_replay(int64_t *published, outbox_db *db, const outbox_config *cfg,
                                       const char *aggregate_type, const char *aggregate_id, int64_t from_seq);

outbox_status outbox_replay_from(int64_t *published, int64_t *from_seq, outbox_db *db,
                                            const outbox_config *cfg, const char *aggregate_type,
                                            const char *aggregate_id, const char *event_id, const char *since);

outbox_status outbox_parked_list(char **json_out, outbox_db *db, const char *consumer, int include_relay,
                                            int limit);

outbox_status outbox_parked_redrive(int64_t *redriven, outbox_db *db, const char *consumer,
                                               const char *aggregate_type, const char *aggregate_id);

outbox_status outbox_parked_redrive_all(int64_t *redriven, outbox_db *db, const char *consumer);

outbox_status outbox_parked_skip(char **skipped_id, outbox_db *db, const char *consumer,
                                            const char *aggregate_type, const char *aggregate_id,
                                            const char *event_id, const char *by, const char *reason);

outbox_status outbox_parked_summary(char **json_out, outbox_db *db);

outbox_status outbox_metrics_text(char **text_out, outbox_db *db);

typedef void (*outbox_progress_fn)(int64_t done, void *user_data);

outbox_status outbox_purge_published_progress(int64_t *deleted, outbox_db *db, int64_t older_than_s,
                                                         int batch, outbox_progress_fn fn, void *user_data);

outbox_status outbox_purge_estimate(int64_t *estimate, outbox_db *db, int64_t older_than_s);

outbox_status outbox_lag(double *lag_s, outbox_db *db);

outbox_status outbox_migrate_versions(int *outbox_from, int *outbox_to, int *inbox_from, int *inbox_to,
                                                 outbox_db *db, outbox_migrate_target target);

typedef struct outbox_tail outbox_tail;

outbox_status outbox_tail_open(outbox_tail **out, const outbox_config *cfg, const char *exchange);

void outbox_tail_close(outbox_tail *tail);

outbox_status outbox_tail_next(outbox_message **out, outbox_tail *tail, int timeout_ms);

const char *outbox_tail_name(const outbox_tail *tail, int queue);

