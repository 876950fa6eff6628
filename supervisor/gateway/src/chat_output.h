/* chat_output.h — what a chat answer's generated text becomes before it is shaped as
 * OpenAI JSON: the think block split off as reasoning (reasoning.c), the model's own
 * tool-call syntax parsed into calls (tool_calls.c), and the two run in sequence over each
 * token (chat_output.c). Pure: no I/O, shared with the unit tests. */
#ifndef DSV_GATEWAY_CHAT_OUTPUT_H
#define DSV_GATEWAY_CHAT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dsv_gateway.h"

struct cJSON;

/* A growable text (buf.h's buffer with its sizes; text.c). */
struct dsv_gw_text {
        char *s;
        size_t len, cap;
};

int dsv__gw_text_add(struct dsv_gw_text *t, const char *s, size_t n);
void dsv__gw_text_free(struct dsv_gw_text *t);
/* The length of the longest suffix of s[0..n) that is a proper prefix of marker: the
 * bytes to hold back, since the next piece may complete the marker. */
size_t dsv__gw_partial_suffix(const char *s, size_t n, const char *marker);

/* ---- the think block (reasoning.c) --------------------------------------------------- */

enum dsv_gw_think_state {
        DSV_GW_THINK_START, /* before any text: "<think>" may open the block */
        DSV_GW_THINK_IN,    /* inside the block: text is reasoning until "</think>" */
        DSV_GW_THINK_AFTER, /* just closed: whitespace before the answer is dropped */
        DSV_GW_THINK_OUT    /* the answer */
};

/* Splits generated text at "<think>" … "</think>" the way vLLM's deepseek_r1 parser and
 * llama-server's --reasoning-format deepseek do, for text arriving in pieces of any size:
 * bytes that may be the start of a marker are held until the next piece decides them. */
struct dsv_gw_think {
        enum dsv_gw_think_state state;
        struct dsv_gw_text held;  /* bytes not yet decided */
        int32_t reasoning_tokens; /* pushes that were (partly) reasoning */
};

/* opened: the prompt already ends inside the block (the template wrote "<think>\n"). */
void dsv__gw_think_init(struct dsv_gw_think *t, bool opened);
void dsv__gw_think_free(struct dsv_gw_think *t);
/* One token's text; what is decided is appended to reasoning or content. 0 or -ENOMEM. */
int dsv__gw_think_push(struct dsv_gw_think *t, const char *s, size_t n, struct dsv_gw_text *reasoning,
                       struct dsv_gw_text *content);
/* The end of the output: held bytes go where they were headed (an unterminated block is
 * all reasoning, as vLLM has it). */
int dsv__gw_think_flush(struct dsv_gw_think *t, struct dsv_gw_text *reasoning, struct dsv_gw_text *content);

/* ---- tool calls (tool_calls.c) -------------------------------------------------------- */

#define DSV_GW_MAX_TOOL_CALLS 64

struct dsv_gw_tool_call {
        char *name;
        struct dsv_gw_text args; /* the arguments JSON text received so far */
        size_t args_sent;        /* stream: bytes of args already sent */
        bool announced;          /* stream: the id/name delta went out */
        bool complete;           /* its end marker (or whole JSON) was seen */
};

enum dsv_gw_tools_state {
        DSV_GW_TOOLS_CONTENT, /* plain answer text; a start marker may come */
        DSV_GW_TOOLS_CALLS,   /* inside the model's tool-call section */
        DSV_GW_TOOLS_DONE     /* the section ended; what follows is dropped */
};

/* Parses one of the generated tool-call formats incrementally: DeepSeek-V3/R1
 * "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>…",
 * Qwen2.5/Hermes "<tool_call>\n{"name":…,"arguments":{…}}\n</tool_call>", Llama-3.1
 * "{"name":…,"parameters":{…}}" (optionally after "<|python_tag|>", several joined by
 * "; "). Text before the section is content; the section's markers never reach it. */
struct dsv_gw_tools {
        enum dsv_gateway_tool_format format;
        bool parallel;               /* false: calls after the first are dropped */
        bool json_calls;             /* the whole output is a call object or an array of
                                      * them (tool_choice's constrained JSON), read at the end */
        enum dsv_gw_tools_state state;
        bool seen_text;              /* llama3: the answer began with something else */
        struct dsv_gw_text held;     /* content bytes that may start the section */
        struct dsv_gw_text section;  /* the section's text */
        size_t pos;                  /* bytes of section parsed */
        int phase;                   /* deepseek: where in a call the parser is */
        struct dsv_gw_tool_call calls[DSV_GW_MAX_TOOL_CALLS];
        size_t n_calls;
};

void dsv__gw_tools_init(struct dsv_gw_tools *p, enum dsv_gateway_tool_format format, bool parallel);
void dsv__gw_tools_free(struct dsv_gw_tools *p);
/* The output is read as tool_constraint.c's constrained JSON instead of the format. */
void dsv__gw_tools_read_json_calls(struct dsv_gw_tools *p);
/* Content text in; answer text out to content, calls into p->calls. 0 or -ENOMEM. */
int dsv__gw_tools_push(struct dsv_gw_tools *p, const char *s, size_t n, struct dsv_gw_text *content);
/* The end of the output: held text is released, the last call parsed if it can be. */
int dsv__gw_tools_finish(struct dsv_gw_tools *p, struct dsv_gw_text *content);
/* Calls complete so far (an unterminated last call is not). */
size_t dsv__gw_tools_complete(const struct dsv_gw_tools *p);

/* ---- the pipeline (chat_output.c) ----------------------------------------------------- */

/* One chat answer's output: think splitting (when on), then tool-call parsing (when the
 * request has tools), gathering the whole answer or handing out per-token deltas. */
struct dsv_gw_chat_out {
        bool split_think;
        bool parse_tools;
        struct dsv_gw_think think;
        struct dsv_gw_tools tools;
        struct dsv_gw_text reasoning, content; /* whole answer, or a stream's pending delta */
        struct dsv_gw_text pre_tools;          /* the think splitter's content, before tool parsing */
        char call_prefix[40];                  /* tool call ids: "<prefix>_<index>" */
        bool any_reasoning;
};

void dsv__gw_chat_out_init(struct dsv_gw_chat_out *c, bool split_think, bool think_opened,
                           enum dsv_gateway_tool_format tools, bool parallel, const char *call_prefix);
/* The output is tool_choice's constrained JSON calls (tool_constraint.c), read as calls
 * whatever the template's format. */
void dsv__gw_chat_out_read_json_calls(struct dsv_gw_chat_out *c);
void dsv__gw_chat_out_free(struct dsv_gw_chat_out *c);
/* One token's text. */
int dsv__gw_chat_out_push(struct dsv_gw_chat_out *c, const char *s, size_t n);
/* The end of the output. */
int dsv__gw_chat_out_finish(struct dsv_gw_chat_out *c);
/* Stream: the delta gathered since the last call ({"reasoning_content","content",
 * "tool_calls":[…]} with only what is new), or NULL when nothing is. Resets the pending
 * texts. */
struct cJSON *dsv__gw_chat_out_delta(struct dsv_gw_chat_out *c);
/* Whole answer: fills message with reasoning_content, content (null when empty and there
 * is reasoning or a call) and tool_calls. */
int dsv__gw_chat_out_message(struct dsv_gw_chat_out *c, struct cJSON *message);
/* "tool_calls" when the output ended with a complete call and the worker said "stop";
 * otherwise the worker's reason. */
const char *dsv__gw_chat_out_finish_reason(const struct dsv_gw_chat_out *c, const char *worker_reason);
/* The same, rewriting the answer's finish reason in place. */
void dsv__gw_chat_out_set_finish(const struct dsv_gw_chat_out *c, char *finish, size_t size);

/* The answer's pipeline, made on first use, or *ret NULL when its request needs none (not
 * chat, or neither reasoning split nor tools). 0 or -ENOMEM. */
struct dsv_gw_answer;
int dsv__gw_answer_chat(struct dsv_gw_answer *a, struct dsv_gw_chat_out **ret);
void dsv__gw_answer_chat_free(struct dsv_gw_answer *a);

#endif
