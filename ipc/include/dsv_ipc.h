/* dsv_ipc.h — the worker protocol: versioned JSON messages over an nng PAIR1 socket.
 *
 * Usage (supervisor side):
 *     struct dsv_ipc_conn *c;
 *     dsv_ipc_dial("ipc:///run/dsvisor-0/worker-0.sock", &c);
 *     struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST};
 *     m.u.request.id = 7; m.u.request.prompt = "Hello"; ...
 *     dsv_ipc_send(c, &m);                      // m stays owned by the caller
 *     struct dsv_ipc_msg ev;
 *     while (dsv_ipc_recv(c, &ev, 1000) == 0) { ...; dsv_ipc_msg_done(&ev); }
 *     dsv_ipc_close(c);
 *
 * Why PAIR1 with request ids, not REQ/REP: REQ gives one reply per request (tokens must
 * stream), resends silently after NNG_OPT_REQ_RESENDTIME and when the peer reconnects
 * (a request could run twice), and allows one outstanding request per context (many
 * contexts collapsed throughput on nng 1.5.2). A worker has exactly one peer — its
 * supervisor — so one PAIR1 pipe carrying id-multiplexed messages in both directions
 * keeps many requests in flight with back-pressure and no duplicates. See PROTOCOL.md.
 *
 * Ownership: decoded messages own their strings and arrays; release them with
 * dsv_ipc_msg_done(). Messages passed to encode/send are only read. A connection may be
 * used for send and recv from different threads at once (nng sockets are thread-safe).
 * Errors are negative errno values: -EPROTO a malformed message, -EPROTONOSUPPORT a
 * peer speaking another protocol major version, -ETIMEDOUT, -ECONNRESET.
 */
#ifndef DSV_IPC_H
#define DSV_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV_IPC_PROTOCOL_VERSION 1
/* Compatible additions within the major version; each message says "minor" (absent: 0).
 * 1: the "events" batch message (PROTOCOL.md), sent only to peers that said minor >= 1.
 * 2: a chat request's "tools" (the function definitions its template renders); a
 *    request's "constraint" and "logit_bias"; "bytes" of top_logprobs alternatives;
 *    speculative decoding counters in stats_reply (optional fields);
 *    request fields max_tokens_to_context and max_prompt_tokens;
 *    stats_reply's optional kv_bytes_per_token.
 * 3: stats_reply's "prefix_query_tokens" and "prefix_hit_tokens" (counters), and
 *    "step_tokens_buckets" (the engine steps by their token count).
 * 4: the constraint kind "composed" (a forced tool call in the model's own syntax).
 * 5: stats_reply's "token_prob_hist" and "entropy_hist" (the output's confidence: each
 *    sampled token's probability and its distribution's entropy, counted in bins) and
 *    "confidence_requests" (the requests those tokens came from).
 * 6: final's "cached_tokens" (prompt tokens served from the KV cache, either tier);
 *    stats_reply's KV disk tier fields (kv_disk_*, prefix_disk_hit_tokens). */
#define DSV_IPC_PROTOCOL_MINOR 6
/* Largest message accepted (a 128k-token prompt as JSON ids is ~1 MiB). */
#define DSV_IPC_MAX_MSG_BYTES (16u << 20)
/* Entries of stats_reply's spec_accepted_hist: 0..8 drafts accepted. */
#define DSV_IPC_SPEC_HIST 9
/* Largest request id, seed and deadline value (JSON numbers with 15 exact digits). */
#define DSV_IPC_MAX_ID 999999999999999ull

enum dsv_ipc_msg_type {
        DSV_IPC_REQUEST,      /* supervisor -> worker: start a generation */
        DSV_IPC_CANCEL,       /* supervisor -> worker: stop request id */
        DSV_IPC_TOKEN,        /* worker -> supervisor: one generated token */
        DSV_IPC_FINAL,        /* worker -> supervisor: request finished */
        DSV_IPC_ERROR,        /* worker -> supervisor: request (or message) failed */
        DSV_IPC_HEALTH,       /* supervisor -> worker: heartbeat probe */
        DSV_IPC_HEALTH_REPLY, /* worker -> supervisor */
        DSV_IPC_STATS,        /* supervisor -> worker: load query */
        DSV_IPC_STATS_REPLY,  /* worker -> supervisor */
        DSV_IPC_MSG_TYPE_COUNT
};

const char *dsv_ipc_msg_type_to_string(enum dsv_ipc_msg_type type);

enum dsv_ipc_input {
        DSV_IPC_INPUT_PROMPT, /* plain text, tokenized by the worker */
        DSV_IPC_INPUT_CHAT,   /* OpenAI-style messages array, rendered with the chat template */
        DSV_IPC_INPUT_TOKENS, /* token ids, used as they are */
        DSV_IPC_INPUT_COUNT
};

/* Stable error codes carried by DSV_IPC_ERROR (also in PROTOCOL.md). */
enum dsv_ipc_error_code {
        DSV_IPC_ERR_INVALID_REQUEST, /* bad parameter, empty prompt, bad UTF-8 */
        DSV_IPC_ERR_PROMPT_TOO_LONG, /* prompt + max_tokens over the context */
        DSV_IPC_ERR_OVERLOADED,      /* queue full */
        DSV_IPC_ERR_DEADLINE,        /* deadline passed before completion */
        DSV_IPC_ERR_CANCELLED,
        DSV_IPC_ERR_PROTOCOL,        /* malformed message or version mismatch */
        DSV_IPC_ERR_INTERNAL,
        DSV_IPC_ERR_SHUTTING_DOWN,
        DSV_IPC_ERROR_CODE_COUNT
};

const char *dsv_ipc_error_code_to_string(enum dsv_ipc_error_code code);

struct dsv_ipc_sampling {
        float temperature;        /* 0: greedy */
        float top_p;              /* 1: off */
        float min_p;              /* 0: off */
        int32_t top_k;            /* 0: off */
        float repetition_penalty; /* 1: off */
        float presence_penalty;   /* 0: off */
        float frequency_penalty;  /* 0: off */
        uint64_t seed;
        int32_t has_seed;         /* 0: the worker picks a seed */
};

/* What a request's output must match (structured output). */
enum dsv_ipc_constraint {
        DSV_IPC_CONSTRAINT_NONE,
        DSV_IPC_CONSTRAINT_JSON_SCHEMA, /* constraint_text: a JSON Schema */
        DSV_IPC_CONSTRAINT_JSON_OBJECT, /* any JSON object; constraint_text unused */
        DSV_IPC_CONSTRAINT_REGEX,       /* constraint_text: a regex (ECMA-262 subset), whole output */
        DSV_IPC_CONSTRAINT_CHOICE,      /* choices: the output is exactly one of them */
        DSV_IPC_CONSTRAINT_GRAMMAR,     /* constraint_text: GBNF (llama.cpp's grammar format) */
        DSV_IPC_CONSTRAINT_COMPOSED,    /* constraint_text: a composed grammar (dse_grammar_compile_composed) */
        DSV_IPC_CONSTRAINT_COUNT
};

const char *dsv_ipc_constraint_to_string(enum dsv_ipc_constraint kind);

/* Added to one token's logit before sampling; -100 bans the token. */
struct dsv_ipc_logit_bias {
        int32_t token;
        float bias; /* -100 .. 100 */
};

struct dsv_ipc_request {
        uint64_t id;
        enum dsv_ipc_input input;
        char *prompt;         /* DSV_IPC_INPUT_PROMPT */
        char *messages_json;  /* DSV_IPC_INPUT_CHAT: a JSON array, kept as text */
        char *tools_json;     /* DSV_IPC_INPUT_CHAT: the tools JSON array for the template, or NULL */
        int32_t *tokens;      /* DSV_IPC_INPUT_TOKENS */
        size_t n_tokens;
        struct dsv_ipc_sampling sampling;
        int32_t max_tokens;
        bool max_tokens_to_context; /* (minor 2) generate up to the context: max_tokens is
                                     * n_ctx minus the prompt's tokens (max_tokens ignored) */
        int32_t max_prompt_tokens;  /* (minor 2) longer prompts: prompt_too_long; 0: n_ctx */
        char **stop;          /* stop strings */
        size_t n_stop;
        int32_t logprobs;     /* top-n logprobs per token, 0: none */
        int64_t deadline_unix_ms; /* 0: none (CLOCK_REALTIME milliseconds) */
        enum dsv_ipc_constraint constraint;
        char *constraint_text; /* JSON_SCHEMA, REGEX, GRAMMAR; else NULL */
        char **choices;        /* CHOICE: n_choices strings (up to 4096) */
        size_t n_choices;
        struct dsv_ipc_logit_bias *logit_bias;
        size_t n_logit_bias;
};

struct dsv_ipc_logprob {
        int32_t token;
        float logprob;
};

/* A token's bytes in the output (possibly part of a character). */
struct dsv_ipc_bytes {
        uint8_t *bytes;
        size_t n;
};

struct dsv_ipc_token {
        uint64_t id;
        int32_t token;
        char *text;                  /* UTF-8 delta, never a split character; may be "" */
        float logprob;               /* of the chosen token; meaningful when n_top > 0 */
        struct dsv_ipc_logprob *top; /* top-n alternatives */
        size_t n_top;
        struct dsv_ipc_bytes *top_bytes; /* (n_top) their bytes; NULL: not known (no tokenizer) */
};

struct dsv_ipc_final {
        uint64_t id;
        char *finish_reason; /* "stop", "length", "cancelled", "deadline" */
        int32_t prompt_tokens;
        int32_t completion_tokens;
        int32_t cached_tokens; /* (minor 6) of prompt_tokens, the ones whose KV came from the
                                * cache (RAM or disk tier) instead of prefill; absent: 0 */
        double queue_s, prefill_s, decode_s, ttft_s;
};

struct dsv_ipc_error {
        uint64_t id; /* 0: the error is about a message, not a request */
        enum dsv_ipc_error_code code;
        char *message;
};

struct dsv_ipc_probe {
        uint64_t seq;
};

struct dsv_ipc_health {
        uint64_t seq;
        char *state; /* "loading", "ready", "draining" */
        double uptime_s;
        uint64_t boot_id; /* the worker process's dsv_ipc_new_boot_id(); 0 when not sent */
};

/* A random id for a starting worker process, in 1 .. 10^15 - 1 (what a JSON number holds
 * exactly). Health replies carry it, so a gateway sees a worker restarted behind a pipe
 * that never broke even when the new process has by then run longer than its predecessor
 * had at the previous poll (uptime alone misses that). */
uint64_t dsv_ipc_new_boot_id(void);

/* Upper bounds of the buckets of stats_reply's step_tokens_buckets (tokens an engine step
 * carried); one more bucket holds the larger steps. */
#define DSV_IPC_STEP_TOKEN_BUCKETS 13
extern const double dsv_ipc_step_token_bounds[DSV_IPC_STEP_TOKEN_BUCKETS];

/* stats_reply's confidence histograms (minor 5): every sampled token counted once in each,
 * by its probability under the model's distribution at that step (bins of 1/32 over
 * [0, 1], the last one closed) and by that distribution's entropy in nats (bins of
 * DSV_IPC_ENTROPY_BIN_NATS from 0, the last one open above). */
#define DSV_IPC_CONFIDENCE_BINS 32
#define DSV_IPC_ENTROPY_BIN_NATS 0.375
/* The bins of a probability (clamped to [0, 1]; NaN: 0) and of an entropy (negative or
 * NaN: 0). */
int dsv_ipc_token_prob_bin(double p);
int dsv_ipc_entropy_bin(double nats);

struct dsv_ipc_stats {
        uint64_t seq;
        int32_t running;
        int32_t waiting;
        int64_t queued_prompt_tokens;
        int32_t kv_blocks_used;
        int32_t kv_blocks_total;
        double prefix_hit_rate;
        int64_t preemptions;
        int32_t max_batch;    /* the worker's sequences per step (0: not reported) */
        int32_t token_budget; /* the worker's tokens per step (0: not reported) */
        int64_t constrained_tokens; /* tokens chosen under a grammar mask (minor 2; absent: 0) */
        int64_t forced_tokens;      /* of those, the ones the mask alone decided */
        /* Speculative decoding (0 when off): verifications (a sequence's steps that
         * carried drafts), draft tokens verified, drafts accepted, and verifications by
         * the number of drafts they accepted (index 0..n_spec_hist-1). */
        int64_t spec_verifications, spec_draft_tokens, spec_accepted_tokens;
        int64_t spec_accepted_hist[DSV_IPC_SPEC_HIST];
        int32_t n_spec_hist;
        int64_t kv_bytes_per_token; /* the KV pool's bytes per position, all layers (0: not reported) */
        int64_t prefix_query_tokens; /* prompt tokens looked up in the prefix cache since start (minor 3; absent: 0) */
        int64_t prefix_hit_tokens;   /* of those, the ones found there */
        /* engine steps since start by tokens carried, per bucket (not cumulative; minor 3,
         * absent: all 0); steps and step_tokens are their count and sum */
        int64_t step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS + 1];
        int64_t steps, step_tokens;
        /* sampled tokens since start by probability and by entropy (minor 5; absent: all 0) */
        int64_t token_prob_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t entropy_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t confidence_requests; /* requests that sampled a token since start (minor 5; absent: 0) */
        /* the KV disk tier (minor 6; absent, or capacity 0: none): its file's bytes in use
         * and size, blocks written to it, read back, dropped (the writer's queue was full)
         * and found corrupt (never served), the prefix hit tokens it supplied (of
         * prefix_hit_tokens), and whether an I/O error turned it off */
        int64_t kv_disk_bytes_used, kv_disk_bytes_capacity;
        int64_t kv_disk_blocks_written, kv_disk_blocks_read, kv_disk_blocks_dropped, kv_disk_blocks_corrupt;
        int64_t prefix_disk_hit_tokens;
        bool kv_disk_failed;
};

struct dsv_ipc_msg {
        enum dsv_ipc_msg_type type;
        int32_t minor; /* decoded: the sender's protocol minor version (0: it did not say) */
        union {
                struct dsv_ipc_request request;
                uint64_t cancel_id;
                struct dsv_ipc_token token;
                struct dsv_ipc_final final;
                struct dsv_ipc_error error;
                struct dsv_ipc_probe probe; /* HEALTH and STATS */
                struct dsv_ipc_health health;
                struct dsv_ipc_stats stats;
        } u;
};

/* Default sampling values (greedy, every filter off). */
void dsv_ipc_sampling_init(struct dsv_ipc_sampling *s);

/* Serialises msg to a malloc'd JSON text in *ret_buf (owned by the caller). */
int dsv_ipc_msg_encode(const struct dsv_ipc_msg *msg, char **ret_buf, size_t *ret_len);

/* Parses one message. On failure returns -EPROTO (or -EPROTONOSUPPORT for another major
 * version) and, when err is non-NULL, a message naming the field. On success *ret owns
 * its strings: release with dsv_ipc_msg_done(). */
int dsv_ipc_msg_decode(const void *buf, size_t len, struct dsv_ipc_msg *ret, char *err, size_t err_size);

/* Frees what a decoded message owns and zeroes it. Safe on a zeroed message. */
void dsv_ipc_msg_done(struct dsv_ipc_msg *msg);

/* Parses one wire message that may be an "events" batch: *ret_msgs is a malloc'd array
 * of *ret_n ≥ 1 messages (one for a plain message), each released with
 * dsv_ipc_msg_done, the array with free(). Errors as dsv_ipc_msg_decode; a batch with a
 * bad event is refused whole. */
int dsv_ipc_msgs_decode(const void *buf, size_t len, struct dsv_ipc_msg **ret_msgs, size_t *ret_n, char *err,
                        size_t err_size);

/* ---- the per-token path: fixed-buffer events and per-step batches ------------------ */

/* Writes a TOKEN, FINAL or ERROR message as JSON into buf (no NUL) without allocating;
 * the same message dsv_ipc_msg_encode would give, field for field. Returns the length,
 * -ENOBUFS when size is too small, -EINVAL for another type or a bad field. */
int dsv_ipc_event_encode(const struct dsv_ipc_msg *msg, char *buf, size_t size);

/* A batch of events in one preallocated buffer, sent as one nng message per scheduler
 * step. Caller-owned storage; the fields are private. One thread at a time.
 *
 *     dsv_ipc_batch_init(&b, 64 << 10, 1024);       // the only allocation
 *     dsv_ipc_batch_add(&b, &token_event);          // -ENOBUFS: full, send it first
 *     dsv_ipc_send_batch(conn, &b);                 // one message; the batch is emptied
 *     dsv_ipc_batch_done(&b);
 */
struct dsv_ipc_batch {
        char *buf;          /* (cap) "{...,"events":[" then the events, comma-separated */
        size_t cap, len;
        uint32_t *ev_off;   /* (cap_events) where each event starts in buf */
        uint32_t *ev_len;   /* (cap_events) its length: each event is a complete message */
        int n_events, cap_events;
};

int dsv_ipc_batch_init(struct dsv_ipc_batch *b, size_t cap_bytes, int cap_events);
void dsv_ipc_batch_done(struct dsv_ipc_batch *b);
/* Appends a TOKEN, FINAL or ERROR event. -ENOBUFS when it does not fit next to what is
 * there (the batch is unchanged: send it, then add again; an event that does not fit an
 * empty batch must go by dsv_ipc_send), -EINVAL as dsv_ipc_event_encode. */
int dsv_ipc_batch_add(struct dsv_ipc_batch *b, const struct dsv_ipc_msg *msg);
int dsv_ipc_batch_count(const struct dsv_ipc_batch *b);
void dsv_ipc_batch_clear(struct dsv_ipc_batch *b);
/* The whole batch as one "events" message (NULL when empty); valid until the next add
 * or clear. */
const char *dsv_ipc_batch_message(struct dsv_ipc_batch *b, size_t *ret_len);
/* Event i alone, as a complete message. */
const char *dsv_ipc_batch_event(const struct dsv_ipc_batch *b, int i, size_t *ret_len);

/* ---- transport ------------------------------------------------------------------ */

struct dsv_ipc_conn;

/* Creates (or checks) the private runtime directory for IPC sockets: mode 0700, owned
 * by the caller: $DSV_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dsvisor, else
 * /run/dsvisor-<uid> (root) or /tmp/dsvisor-<uid>. Refuses a directory with other
 * owners or group/other permissions (-EPERM). */
int dsv_ipc_runtime_dir(char *buf, size_t size);

/* Worker side: listens on url ("ipc:///path" or "inproc://name"). For ipc:// the socket
 * file is created 0600 and must live in a 0700 directory owned by us (-EPERM
 * otherwise; abstract sockets are refused); connecting peers with another uid are
 * dropped. */
int dsv_ipc_listen(const char *url, struct dsv_ipc_conn **ret_conn);
/* Supervisor side: dials url, reconnecting in the background if the peer restarts. */
int dsv_ipc_dial(const char *url, struct dsv_ipc_conn **ret_conn);
/* Closes the connection. Returns within about half a second even when nng 1.5.2's close
 * hangs (then the socket is left behind, with a warning on stderr; see transport.c). */
void dsv_ipc_close(struct dsv_ipc_conn *conn);
/* Closes this process left unfinished so far (each also warned about on stderr). */
unsigned dsv_ipc_abandoned_closes(void);
/* dsv_ipc_close after waiting linger_ms for sent messages to be written: nng 1.5.2
 * discards messages still queued in a pipe when its socket closes, and has no way to wait
 * for them (NNG_OPT_LINGER is not implemented), so a worker that exits right after its
 * last answers would lose them. A time-bounded linger, as ZMQ_LINGER. */
void dsv_ipc_close_linger(struct dsv_ipc_conn *conn, int linger_ms);
/* How long a worker lingers before closing after a drain. */
#define DSV_IPC_LINGER_MS 200

int dsv_ipc_send(struct dsv_ipc_conn *conn, const struct dsv_ipc_msg *msg);
/* Sends the batch's events and empties it (also on failure): one nng message — an
 * "events" message, or the event itself when it is alone — or, to a peer whose last
 * message said minor 0 (it predates "events"), one message per event. The only
 * allocation is nng's message (nng_send copies the bytes into a new nng_msg). 0 for an
 * empty batch. */
int dsv_ipc_send_batch(struct dsv_ipc_conn *conn, struct dsv_ipc_batch *b);
/* Receives one message: -ETIMEDOUT after timeout_ms (< 0: wait forever; 0: only what is
 * already queued), -EPROTO for a malformed message (the message is dropped; err says
 * why), -ECANCELED once closed. An "events" message is handed out one event per call, in
 * order (keep to one receiving thread per connection for that order). */
int dsv_ipc_recv(struct dsv_ipc_conn *conn, struct dsv_ipc_msg *ret, int timeout_ms, char *err,
                 size_t err_size);
/* Number of connected peers (0 or 1), and peers dropped for a uid mismatch. */
int dsv_ipc_peers(const struct dsv_ipc_conn *conn);
int dsv_ipc_rejected_peers(const struct dsv_ipc_conn *conn);

#ifdef __cplusplus
}
#endif
#endif
