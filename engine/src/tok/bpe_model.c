/* The BPE model of tokenizers (models/bpe/model.rs): vocabulary, merge ranks, and the
 * merge loop that always applies the lowest-ranked adjacent pair, leftmost first (a
 * binary heap over candidate pairs, stale entries skipped, as Word::merge_all does).
 * Results are cached per pre-token for the duration of one encode call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_impl.h"

#define BPE_CACHE_MAX_WORD 256

/* Loads n < 8 bytes as a little-endian word without a libc call. */
static inline uint64_t load_tail(const char *s, size_t n) {
        uint64_t w = 0;
        if (n >= 4) {
                uint32_t a, b;
                memcpy(&a, s, 4);
                memcpy(&b, s + n - 4, 4);
                return (uint64_t)a | (uint64_t)b << ((n - 4) * 8);
        }
        for (size_t i = 0; i < n; i++)
                w |= (uint64_t)(uint8_t)s[i] << (8 * i);
        return w;
}

static inline uint64_t hash_bytes(const char *s, size_t n) {
        uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
        while (n >= 8) {
                uint64_t w;
                memcpy(&w, s, 8);
                h = (h ^ w) * 0xff51afd7ed558ccdull;
                h ^= h >> 32;
                s += 8;
                n -= 8;
        }
        h = (h ^ load_tail(s, n)) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
        return h;
}

static inline uint64_t hash_u64(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        return k;
}

/* The key's first 16 bytes, zero-padded, as two words (how slots store them). */
static inline void key_head(const char *s, size_t len, uint64_t head[2]) {
        if (len >= 16) {
                memcpy(head, s, 16);
        } else if (len >= 8) {
                memcpy(&head[0], s, 8);
                head[1] = load_tail(s + 8, len - 8);
        } else {
                head[0] = load_tail(s, len);
                head[1] = 0;
        }
}

static inline int slot_matches(const struct bpe *bpe, const struct bpe_vocab_slot *e, uint32_t tag,
                               const uint64_t head[2], const char *s, size_t len) {
        if (e->tag != tag || e->len != len || e->head[0] != head[0] || e->head[1] != head[1])
                return 0;
        return len <= 16 || memcmp(bpe->strs + e->off + 16, s + 16, len - 16) == 0;
}

static int32_t vocab_find_hashed(const struct bpe *bpe, const char *s, size_t len, uint64_t h) {
        uint32_t i = (uint32_t)h & bpe->vocab_mask, tag = (uint32_t)(h >> 32);
        uint64_t head[2];
        key_head(s, len, head);
        for (;;) {
                const struct bpe_vocab_slot *e = &bpe->vocab[i];
                if (!e->id1)
                        return -1;
                if (slot_matches(bpe, e, tag, head, s, len))
                        return e->id1 - 1;
                i = (i + 1) & bpe->vocab_mask;
        }
}

int32_t dse__bpe_vocab_find(const struct bpe *bpe, const char *s, size_t len) {
        return vocab_find_hashed(bpe, s, len, hash_bytes(s, len));
}

/* The key must already be in bpe->strs; a repeated key keeps the last id, as
 * tokenizers' HashMap does. Returns 1 when the key was there already. */
static int vocab_insert_hashed(struct bpe *bpe, uint32_t off, size_t len, int32_t id, uint64_t h) {
        const char *s = bpe->strs + off;
        uint32_t i = (uint32_t)h & bpe->vocab_mask, tag = (uint32_t)(h >> 32);
        uint64_t head[2];
        key_head(s, len, head);
        for (;;) {
                struct bpe_vocab_slot *e = &bpe->vocab[i];
                if (!e->id1 || slot_matches(bpe, e, tag, head, s, len)) {
                        int repeated = e->id1 != 0;
                        e->tag = tag;
                        e->off = off;
                        e->len = (uint32_t)len;
                        e->id1 = id + 1;
                        e->head[0] = head[0];
                        e->head[1] = head[1];
                        return repeated;
                }
                i = (i + 1) & bpe->vocab_mask;
        }
}

int dse__bpe_vocab_insert(struct bpe *bpe, const char *s, size_t len, int32_t id) {
        return vocab_insert_hashed(bpe, (uint32_t)(s - bpe->strs), len, id, hash_bytes(s, len));
}

#define BATCH 64

void dse__bpe_vocab_find_batch(const struct bpe *bpe, const char *const *s, const uint32_t *len, size_t n,
                               int32_t *ret_ids) {
        for (size_t base = 0; base < n; base += BATCH) {
                size_t m = n - base < BATCH ? n - base : BATCH;
                uint64_t h[BATCH];
                for (size_t i = 0; i < m; i++) {
                        h[i] = hash_bytes(s[base + i], len[base + i]);
                        __builtin_prefetch(&bpe->vocab[(uint32_t)h[i] & bpe->vocab_mask]);
                }
                for (size_t i = 0; i < m; i++)
                        ret_ids[base + i] = vocab_find_hashed(bpe, s[base + i], len[base + i], h[i]);
        }
}

size_t dse__bpe_vocab_insert_batch(struct bpe *bpe, const uint32_t *off, const uint32_t *len, const int32_t *ids,
                                   size_t n) {
        size_t repeated = 0;
        for (size_t base = 0; base < n; base += BATCH) {
                size_t m = n - base < BATCH ? n - base : BATCH;
                uint64_t h[BATCH];
                for (size_t i = 0; i < m; i++) {
                        h[i] = hash_bytes(bpe->strs + off[base + i], len[base + i]);
                        __builtin_prefetch(&bpe->vocab[(uint32_t)h[i] & bpe->vocab_mask], 1);
                }
                for (size_t i = 0; i < m; i++)
                        repeated += (size_t)vocab_insert_hashed(bpe, off[base + i], len[base + i], ids[base + i], h[i]);
        }
        return repeated;
}

static inline const struct bpe_merge_slot *merge_find(const struct bpe *bpe, int32_t left, int32_t right) {
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        uint32_t i = (uint32_t)hash_u64(key) & bpe->merge_mask;
        for (;;) {
                const struct bpe_merge_slot *e = &bpe->merges[i];
                if (e->nkey == ~key)
                        return e;
                if (!e->nkey)
                        return NULL;
                i = (i + 1) & bpe->merge_mask;
        }
}

/* A repeated pair keeps the later rank, as tokenizers' HashMap collect does. */
int dse__bpe_merge_insert(struct bpe *bpe, int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        uint32_t i = (uint32_t)hash_u64(key) & bpe->merge_mask;
        for (;;) {
                struct bpe_merge_slot *e = &bpe->merges[i];
                if (e->nkey == ~key || !e->nkey) {
                        e->nkey = ~key;
                        e->rank = rank;
                        e->new_id = new_id;
                        return 0;
                }
                i = (i + 1) & bpe->merge_mask;
        }
}

void dse__bpe_merge_insert_batch(struct bpe *bpe, const int32_t *left, const int32_t *right, const uint32_t *rank,
                            const int32_t *new_id, size_t n) {
        for (size_t base = 0; base < n; base += BATCH) {
                size_t m = n - base < BATCH ? n - base : BATCH;
                for (size_t i = base; i < base + m; i++) {
                        uint64_t key = (uint64_t)(uint32_t)left[i] << 32 | (uint32_t)right[i];
                        __builtin_prefetch(&bpe->merges[(uint32_t)hash_u64(key) & bpe->merge_mask], 1);
                }
                for (size_t i = base; i < base + m; i++)
                        dse__bpe_merge_insert(bpe, left[i], right[i], rank[i], new_id[i]);
        }
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
 * bytes to U+0100.. in byte order (0-32, 127-160, 173). */
int32_t dse__bpe_byte_to_cp(uint8_t b) {
        if (b <= 32)
                return 256 + b;
        if (b >= 127 && b <= 160)
                return b + 162;
        if (b == 173)
                return 323;
        return b;
}

int dse__bpe_cp_to_byte(int32_t cp) {
        if (cp < 0 || cp > 323)
                return -1;
        if (cp < 256)
                return (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) ? -1 : cp;
        if (cp <= 288)
                return cp - 256;
        if (cp <= 322)
                return cp - 162;
        return 173;
}

/* ---- per-call cache ------------------------------------------------------------------ */

static struct bpe_cache_slot *cache_find(struct bpe_ws *ws, const char *s, size_t len, uint64_t h) {
        if (!ws->cache)
                return NULL;
        uint32_t i = (uint32_t)h & ws->cache_mask;
        for (;;) {
                struct bpe_cache_slot *e = &ws->cache[i];
                if (!e->n_ids)
                        return e;
                if (e->hash == h && e->key_len == len && memcmp(ws->cache_keys.p + e->key_off, s, len) == 0)
                        return e;
                i = (i + 1) & ws->cache_mask;
        }
}

static int cache_grow(struct bpe_ws *ws) {
        uint32_t n = ws->cache ? (ws->cache_mask + 1) * 2 : 256;
        struct bpe_cache_slot *t = calloc(n, sizeof *t);
        if (!t)
                return -ENOMEM;
        if (ws->cache) {
                for (uint32_t i = 0; i <= ws->cache_mask; i++) {
                        struct bpe_cache_slot *e = &ws->cache[i];
                        if (!e->n_ids)
                                continue;
                        uint32_t k = (uint32_t)e->hash & (n - 1);
                        while (t[k].n_ids)
                                k = (k + 1) & (n - 1);
                        t[k] = *e;
                }
                free(ws->cache);
        }
        ws->cache = t;
        ws->cache_mask = n - 1;
        return 0;
}

static int cache_put(struct bpe_ws *ws, const char *s, size_t len, uint64_t h, const int32_t *ids, size_t n_ids) {
        if (!ws->cache || (ws->cache_used + 1) * 2 > ws->cache_mask + 1) {
                int r = cache_grow(ws);
                if (r < 0)
                        return r;
        }
        struct bpe_cache_slot *e = cache_find(ws, s, len, h);
        if (e->n_ids)
                return 0;
        size_t key_off = ws->cache_keys.len, ids_off = ws->cache_ids.len / sizeof(int32_t);
        if (key_off > UINT32_MAX - len || ids_off > UINT32_MAX - n_ids)
                return 0; /* cache full: keep working uncached */
        int r = dse__tok_buf_put(&ws->cache_keys, s, len);
        if (r == 0)
                r = dse__tok_buf_put(&ws->cache_ids, ids, n_ids * sizeof(int32_t));
        if (r < 0)
                return r;
        e->hash = h;
        e->key_off = (uint32_t)key_off;
        e->key_len = (uint32_t)len;
        e->ids_off = (uint32_t)ids_off;
        e->n_ids = (uint32_t)n_ids;
        ws->cache_used++;
        return 0;
}

/* ---- the merge loop ------------------------------------------------------------------ */

struct sym {
        int32_t id;
        int32_t prev, next; /* -1 at the ends */
        int32_t alive;
};

struct cand {
        uint32_t rank;
        uint32_t pos;
        int32_t new_id;
};

static inline int cand_less(const struct cand *a, const struct cand *b) {
        return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c) {
        size_t i = (*n)++;
        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (!cand_less(&c, &h[p]))
                        break;
                h[i] = h[p];
                i = p;
        }
        h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n) {
        struct cand top = h[0], last = h[--(*n)];
        size_t i = 0;
        for (;;) {
                size_t l = 2 * i + 1, best = i;
                const struct cand *bc = &last;
                if (l < *n && cand_less(&h[l], bc)) {
                        best = l;
                        bc = &h[l];
                }
                if (l + 1 < *n && cand_less(&h[l + 1], bc))
                        best = l + 1;
                if (best == i)
                        break;
                h[i] = h[best];
                i = best;
        }
        if (*n)
                h[i] = last;
        return top;
}

static void push_pair(const struct bpe *bpe, struct sym *syms, int32_t pos, struct cand *heap, size_t *n_heap) {
        int32_t next = syms[pos].next;
        if (next < 0)
                return;
        const struct bpe_merge_slot *m = merge_find(bpe, syms[pos].id, syms[next].id);
        if (m)
                heap_push(heap, n_heap, (struct cand){m->rank, (uint32_t)pos, m->new_id});
}

static void merge_all(const struct bpe *bpe, struct sym *syms, size_t n, struct cand *heap) {
        size_t n_heap = 0;
        for (size_t i = 0; i + 1 < n; i++)
                push_pair(bpe, syms, (int32_t)i, heap, &n_heap);
        while (n_heap) {
                struct cand top = heap_pop(heap, &n_heap);
                struct sym *s = &syms[top.pos];
                if (!s->alive || s->next < 0)
                        continue;
                struct sym *right = &syms[s->next];
                const struct bpe_merge_slot *m = merge_find(bpe, s->id, right->id);
                if (!m || m->new_id != top.new_id)
                        continue; /* stale: one side was merged away since */
                s->id = top.new_id;
                right->alive = 0;
                s->next = right->next;
                if (s->next >= 0)
                        syms[s->next].prev = (int32_t)top.pos;
                if (s->prev >= 0)
                        push_pair(bpe, syms, s->prev, heap, &n_heap);
                push_pair(bpe, syms, (int32_t)top.pos, heap, &n_heap);
        }
}

/* ---- symbols from text ---------------------------------------------------------------- */

struct sym_list {
        struct sym *syms;
        size_t n;
};

static void sym_add(struct sym_list *l, int32_t id) {
        struct sym *s = &l->syms[l->n];
        s->id = id;
        s->prev = (int32_t)l->n - 1;
        s->next = -1;
        s->alive = 1;
        if (l->n)
                l->syms[l->n - 1].next = (int32_t)l->n;
        l->n++;
}

/* models/bpe/model.rs merge_word: one symbol per character (with the continuing-subword
 * prefix and end-of-word suffix), byte fallback to <0xXX>, and unk (fused when
 * fuse_unk) for characters without a vocabulary entry. */
static int text_symbols(const struct bpe *bpe, struct tok_buf *tmp, const char *s, size_t len, struct sym_list *l) {
        size_t pre_len = bpe->cont_prefix ? strlen(bpe->cont_prefix) : 0;
        size_t suf_len = bpe->end_suffix ? strlen(bpe->end_suffix) : 0;
        int have_unk = 0;
        for (size_t i = 0; i < len;) {
                int32_t cp;
                int n = dse__utf8_next(s + i, len - i, &cp);
                int is_first = i == 0, is_last = i + (size_t)n >= len;
                const char *key = s + i;
                size_t key_len = (size_t)n;
                if ((!is_first && pre_len) || (is_last && suf_len)) {
                        tmp->len = 0;
                        if ((!is_first && pre_len && dse__tok_buf_put(tmp, bpe->cont_prefix, pre_len) < 0) ||
                            dse__tok_buf_put(tmp, s + i, (size_t)n) < 0 ||
                            (is_last && suf_len && dse__tok_buf_put(tmp, bpe->end_suffix, suf_len) < 0))
                                return -ENOMEM;
                        key = tmp->p;
                        key_len = tmp->len;
                }
                int32_t id = dse__bpe_vocab_find(bpe, key, key_len);
                i += (size_t)n;
                if (id >= 0) {
                        if (have_unk) {
                                sym_add(l, bpe->unk_id);
                                have_unk = 0;
                        }
                        sym_add(l, id);
                        continue;
                }
                if (bpe->byte_fallback) {
                        int all = 1;
                        for (size_t k = 0; k < key_len; k++)
                                all &= bpe->byte_fallback_id[(uint8_t)key[k]] >= 0;
                        if (all) {
                                /* tokenizers adds these before a pending unk; same here */
                                for (size_t k = 0; k < key_len; k++)
                                        sym_add(l, bpe->byte_fallback_id[(uint8_t)key[k]]);
                                continue;
                        }
                }
                if (bpe->unk_id >= 0) {
                        if (have_unk && !bpe->fuse_unk)
                                sym_add(l, bpe->unk_id);
                        have_unk = 1;
                }
        }
        if (have_unk)
                sym_add(l, bpe->unk_id);
        return 0;
}

int dse__bpe_model_encode(struct bpe_ws *ws, const char *s, size_t len, int raw_bytes) {
        const struct bpe *bpe = ws->bpe;
        int r;
        if (!len)
                return 0;
        uint64_t h = 0;
        int cacheable = len <= BPE_CACHE_MAX_WORD;
        if (cacheable) {
                h = hash_bytes(s, len);
                struct bpe_cache_slot *e = cache_find(ws, s, len, h);
                if (e && e->n_ids) {
                        const int32_t *ids = (const int32_t *)ws->cache_ids.p + e->ids_off;
                        for (uint32_t i = 0; i < e->n_ids; i++)
                                if ((r = bpe_out_push(ws->out, ids[i])) < 0)
                                        return r;
                        return 0;
                }
        }
        int32_t whole = -1;
        if (bpe->ignore_merges) {
                if (raw_bytes) {
                        ws->word.len = 0;
                        if ((r = dse__tok_buf_reserve(&ws->word, len * 2)) < 0)
                                return r;
                        for (size_t i = 0; i < len; i++)
                                ws->word.len += (size_t)dse__utf8_encode(dse__bpe_byte_to_cp((uint8_t)s[i]),
                                                                        ws->word.p + ws->word.len);
                        whole = dse__bpe_vocab_find(bpe, ws->word.p, ws->word.len);
                } else {
                        whole = dse__bpe_vocab_find(bpe, s, len);
                }
        }
        int32_t one[1];
        const int32_t *ids = one;
        size_t n_ids = 0;
        if (whole >= 0) {
                one[0] = whole;
                n_ids = 1;
        } else {
                /* at most 4 symbols per byte (byte fallback of a multi-byte char counts 1
                 * per byte; a prefixed char is still one symbol) */
                ws->heap.len = 0;
                if ((r = dse__tok_buf_reserve(&ws->heap, len * (sizeof(struct sym) + 3 * sizeof(struct cand)) + 64)) < 0)
                        return r;
                struct sym_list l = {(struct sym *)ws->heap.p, 0};
                struct cand *heap = (struct cand *)(ws->heap.p + len * sizeof(struct sym));
                if (raw_bytes) {
                        for (size_t i = 0; i < len; i++)
                                sym_add(&l, bpe->byte_char_id[(uint8_t)s[i]]);
                } else if ((r = text_symbols(bpe, &ws->word, s, len, &l)) < 0) {
                        return r;
                }
                merge_all(bpe, l.syms, l.n, heap);
                /* compact the surviving symbols in place */
                int32_t *out = (int32_t *)l.syms;
                for (int32_t i = l.n ? 0 : -1; i >= 0;) {
                        int32_t next = l.syms[i].next, id = l.syms[i].id;
                        out[n_ids++] = id;
                        i = next;
                }
                ids = out;
        }
        for (size_t i = 0; i < n_ids; i++)
                if ((r = bpe_out_push(ws->out, ids[i])) < 0)
                        return r;
        if (cacheable && n_ids)
                return cache_put(ws, s, len, h, ids, n_ids);
        return 0;
}
