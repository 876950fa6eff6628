/* tok_json.h — the engine's JSON reader (engine-internal): tokenizer.json,
 * tokenizer_config.json and the chat templates' messages and tools. One pass, strings
 * decoded into one arena, nodes in one array (children of a container are contiguous): a
 * 2-10 MB tokenizer.json loads without cJSON's malloc per node, which alone cost about
 * as long as the rest of the load. */
#ifndef DSE_TOK_JSON_H
#define DSE_TOK_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "dse.h"

enum bj_type { BJ_NULL, BJ_FALSE, BJ_TRUE, BJ_NUMBER, BJ_STRING, BJ_ARRAY, BJ_OBJECT };

/* What a number holds: an integer in i, or anything else in num (a fraction or exponent,
 * or an integer past 64 bits, which chat templates refuse and Python would keep). */
enum bj_num_kind { BJ_FLOAT, BJ_INT, BJ_BIG_INT };

struct bj {
        uint8_t type;
        uint8_t num_kind;  /* numbers: enum bj_num_kind */
        uint32_t n;        /* string length in bytes, or number of children */
        uint32_t key_len;  /* member key (objects' children only) */
        const char *key;
        union {
                const char *str; /* NUL-terminated, may contain NULs (use n) */
                uint32_t first;  /* index of the first child in doc->nodes */
                double num;
                int64_t i;
        };
};

/* A number's value as a double. */
static inline double dse__bj_num(const struct bj *v) {
        return v->num_kind == BJ_INT ? (double)v->i : v->num;
}

struct bj_doc {
        struct bj *nodes;  /* dse__bpe_map'ed, nodes_size bytes */
        char *strs;        /* dse__bpe_map'ed, strs_size bytes */
        size_t nodes_size, strs_size;
        uint32_t root;
};

/* Parses RFC 8259 JSON (UTF-8 checked, nesting depth <= 256). With the byte offset in
 * reterr: -EILSEQ for invalid UTF-8 or an unpaired surrogate escape, -EBADMSG for other
 * malformed input. */
int dse__bj_parse(const char *text, size_t len, struct bj_doc *doc, struct dse_diag *reterr);
void dse__bj_free(struct bj_doc *doc);
const struct bj *dse__bj_root(const struct bj_doc *doc);
/* Child i of an array or object, NULL when out of range (inline: called per vocabulary
 * entry and merge). */
static inline const struct bj *dse__bj_at(const struct bj_doc *doc, const struct bj *v, uint32_t i) {
        if (!v || (v->type != BJ_ARRAY && v->type != BJ_OBJECT) || i >= v->n)
                return NULL;
        return &doc->nodes[v->first + i];
}
/* Member of an object by key, NULL when absent or when v is not an object. */
const struct bj *dse__bj_get(const struct bj_doc *doc, const struct bj *v, const char *key);
/* Convenience: string member or NULL; bool member or dflt. */
const char *dse__bj_get_str(const struct bj_doc *doc, const struct bj *v, const char *key);
int dse__bj_get_bool(const struct bj_doc *doc, const struct bj *v, const char *key, int dflt);

#endif
