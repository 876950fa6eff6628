/* A byte trie for piece lookup (the role darts-clone plays in SentencePiece), a growable
 * byte buffer and a strict UTF-8 decoder for the SentencePiece tokenizer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spm_model.h"

static size_t edge_hash(uint64_t key, size_t cap) {
        key *= 0x9E3779B97F4A7C15ull;
        return (size_t)(key >> 32) & (cap - 1);
}

int dse__spm_trie_init(struct spm_trie *t) {
        *t = (struct spm_trie){0};
        t->cap_nodes = 64;
        t->value = malloc(t->cap_nodes * sizeof *t->value);
        t->edge_cap = 128;
        t->edge_key = calloc(t->edge_cap, sizeof *t->edge_key);
        t->edge_child = calloc(t->edge_cap, sizeof *t->edge_child);
        if (!t->value || !t->edge_key || !t->edge_child) {
                dse__spm_trie_done(t);
                return -ENOMEM;
        }
        t->value[0] = -1;
        t->n_nodes = 1;
        return 0;
}

void dse__spm_trie_done(struct spm_trie *t) {
        free(t->value);
        free(t->edge_key);
        free(t->edge_child);
        *t = (struct spm_trie){0};
}

static int edges_grow(struct spm_trie *t) {
        size_t cap = t->edge_cap * 2;
        uint64_t *keys = calloc(cap, sizeof *keys);
        uint32_t *child = calloc(cap, sizeof *child);
        if (!keys || !child) {
                free(keys);
                free(child);
                return -ENOMEM;
        }
        for (size_t i = 0; i < t->edge_cap; i++) {
                if (!t->edge_key[i])
                        continue;
                size_t h = edge_hash(t->edge_key[i], cap);
                while (keys[h])
                        h = (h + 1) & (cap - 1);
                keys[h] = t->edge_key[i];
                child[h] = t->edge_child[i];
        }
        free(t->edge_key);
        free(t->edge_child);
        t->edge_key = keys;
        t->edge_child = child;
        t->edge_cap = cap;
        return 0;
}

uint32_t dse__spm_trie_step(const struct spm_trie *t, uint32_t node, uint8_t b) {
        uint64_t key = (((uint64_t)node << 8) | b) + 1;
        for (size_t h = edge_hash(key, t->edge_cap);; h = (h + 1) & (t->edge_cap - 1)) {
                if (t->edge_key[h] == key)
                        return t->edge_child[h];
                if (!t->edge_key[h])
                        return 0;
        }
}

int dse__spm_trie_insert(struct spm_trie *t, const char *key, size_t len, int32_t value) {
        uint32_t node = 0;
        for (size_t i = 0; i < len; i++) {
                uint32_t child = dse__spm_trie_step(t, node, (uint8_t)key[i]);
                if (!child) {
                        if (t->n_nodes == UINT32_MAX)
                                return -ENOMEM;
                        if (t->n_nodes == t->cap_nodes) {
                                uint32_t cap = t->cap_nodes > UINT32_MAX / 2 ? UINT32_MAX : t->cap_nodes * 2;
                                int32_t *v = realloc(t->value, (size_t)cap * sizeof *v);
                                if (!v)
                                        return -ENOMEM;
                                t->value = v;
                                t->cap_nodes = cap;
                        }
                        if ((t->n_edges + 1) * 2 > t->edge_cap && edges_grow(t) < 0)
                                return -ENOMEM;
                        child = t->n_nodes++;
                        t->value[child] = -1;
                        uint64_t k = (((uint64_t)node << 8) | (uint8_t)key[i]) + 1;
                        size_t h = edge_hash(k, t->edge_cap);
                        while (t->edge_key[h])
                                h = (h + 1) & (t->edge_cap - 1);
                        t->edge_key[h] = k;
                        t->edge_child[h] = child;
                        t->n_edges++;
                }
                node = child;
        }
        if (t->value[node] >= 0)
                return -EEXIST;
        t->value[node] = value;
        return 0;
}

int32_t dse__spm_trie_get(const struct spm_trie *t, const char *key, size_t len) {
        uint32_t node = 0;
        for (size_t i = 0; i < len; i++) {
                node = dse__spm_trie_step(t, node, (uint8_t)key[i]);
                if (!node)
                        return -1;
        }
        return t->value[node];
}

size_t dse__spm_trie_longest_prefix(const struct spm_trie *t, const char *s, size_t len) {
        size_t best = 0;
        uint32_t node = 0;
        for (size_t i = 0; i < len; i++) {
                node = dse__spm_trie_step(t, node, (uint8_t)s[i]);
                if (!node)
                        break;
                if (t->value[node] >= 0)
                        best = i + 1;
        }
        return best;
}
