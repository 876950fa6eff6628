/* SentencePiece's normalizer (normalizer.cc): longest-prefix rewriting through the
 * precompiled_charsmap, user-defined symbols kept verbatim, whitespace trimming and
 * collapsing, the dummy prefix and escaping spaces as U+2581.
 *
 * precompiled_charsmap layout: <uint32 LE trie_size><darts-clone double array of
 * trie_size bytes><NUL-separated replacement strings>. A double-array unit is a uint32:
 * bit 8 = has a leaf, bits 0-7 (and bit 31) = label, bits 10.. = offset (shifted by 8
 * when bit 9 is set), and a leaf unit's low 31 bits are the value: the offset of the
 * replacement string in the string blob. */
#include <string.h>

#include "../internal.h"
#include "spm_model.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81"; /* U+2581 */

static uint32_t unit_at(const struct spm_normalizer *n, size_t i) {
        const uint8_t *p = n->trie_units + 4 * i;
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t unit_offset(uint32_t u) {
        return (u >> 10) << ((u & (1u << 9)) >> 6);
}

/* Longest key of the double array that prefixes s[0..len): returns its length (0 when
 * none) and its value in *ret_value. Walks like darts-clone's commonPrefixSearch, with
 * every index checked against the array size. */
static size_t charsmap_longest(const struct spm_normalizer *n, const char *s, size_t len, uint32_t *ret_value) {
        if (n->n_units == 0)
                return 0;
        size_t best = 0;
        uint32_t id = unit_offset(unit_at(n, 0));
        for (size_t i = 0; i < len; i++) {
                uint8_t c = (uint8_t)s[i];
                id ^= c;
                if (id >= n->n_units)
                        break;
                uint32_t u = unit_at(n, id);
                if ((u & 0x800000ffu) != c)
                        break;
                id ^= unit_offset(u);
                if ((u >> 8) & 1) {
                        if (id >= n->n_units)
                                break;
                        best = i + 1;
                        *ret_value = unit_at(n, id) & 0x7fffffffu;
                }
        }
        return best;
}

int dse__spm_normalizer_init(struct spm_normalizer *n, const struct spm_proto_normalizer *spec,
                             bool treat_whitespace_as_suffix, const struct spm_trie *user_defined,
                             struct dse_diag *reterr) {
        *n = (struct spm_normalizer){
                .add_dummy_prefix = spec->add_dummy_prefix,
                .remove_extra_whitespaces = spec->remove_extra_whitespaces,
                .escape_whitespaces = spec->escape_whitespaces,
                .treat_whitespace_as_suffix = treat_whitespace_as_suffix,
                .user_defined = user_defined,
        };
        const uint8_t *blob = (const uint8_t *)spec->precompiled_charsmap.ptr;
        size_t len = spec->precompiled_charsmap.len;
        if (len == 0)
                return 0;
        if (len <= 4)
                return dse__fail(reterr, -EBADMSG, "precompiled_charsmap: %zu bytes, too short for its header",
                                 len);
        uint32_t trie_size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                             (uint32_t)blob[3] << 24;
        if (trie_size >= len || trie_size > len - 4)
                return dse__fail(reterr, -EBADMSG,
                                 "precompiled_charsmap: trie size %u exceeds the %zu-byte blob", trie_size, len);
        n->trie_units = blob + 4;
        n->n_units = trie_size / 4;
        n->replacements = (const char *)blob + 4 + trie_size;
        n->replacements_len = len - 4 - trie_size;
        return 0;
}

/* One step of normalization (NormalizePrefix): how many input bytes are consumed and
 * what they become. */
static int normalize_prefix(const struct spm_normalizer *n, const char *in, size_t len, const char **ret_out,
                            size_t *ret_out_len, size_t *ret_consumed) {
        if (n->user_defined) {
                size_t m = dse__spm_trie_longest_prefix(n->user_defined, in, len);
                if (m > 0) {
                        *ret_out = in;
                        *ret_out_len = m;
                        *ret_consumed = m;
                        return 0;
                }
        }
        uint32_t value = 0;
        size_t m = charsmap_longest(n, in, len, &value);
        if (m > 0) {
                if (value >= n->replacements_len)
                        return -EBADMSG;
                const char *rep = n->replacements + value;
                const char *nul = memchr(rep, '\0', n->replacements_len - value);
                if (!nul)
                        return -EBADMSG;
                *ret_out = rep;
                *ret_out_len = (size_t)(nul - rep);
                *ret_consumed = m;
                return 0;
        }
        uint32_t cp;
        int c = dse__utf8_decode(in, len, &cp);
        if (c < 0) {
                /* Malformed UTF-8: one byte becomes U+FFFD (the public encoder rejects such
                 * input before it gets here). */
                *ret_out = "\xef\xbf\xbd";
                *ret_out_len = 3;
                *ret_consumed = 1;
                return 0;
        }
        *ret_out = in;
        *ret_out_len = (size_t)c;
        *ret_consumed = (size_t)c;
        return 0;
}

static int add_space(const struct spm_normalizer *n, struct tok_buf *out) {
        return n->escape_whitespaces ? dse__tok_buf_put(out, SPACE_SYMBOL, 3) : dse__tok_buf_put(out, " ", 1);
}

int dse__spm_normalize(const struct spm_normalizer *n, const char *in, size_t len, struct tok_buf *out) {
        const char *piece;
        size_t piece_len, consumed;
        int ret;
        if (len == 0)
                return 0;
        /* Leading whitespace (after normalization) is dropped. */
        if (n->remove_extra_whitespaces) {
                while (len > 0) {
                        if ((ret = normalize_prefix(n, in, len, &piece, &piece_len, &consumed)) < 0)
                                return ret;
                        if (piece_len != 1 || piece[0] != ' ')
                                break;
                        in += consumed;
                        len -= consumed;
                }
        }
        if (len == 0)
                return 0;
        size_t start = out->len;
        if (!n->treat_whitespace_as_suffix && n->add_dummy_prefix && (ret = add_space(n, out)) < 0)
                return ret;

        bool prev_space = n->remove_extra_whitespaces;
        while (len > 0) {
                if ((ret = normalize_prefix(n, in, len, &piece, &piece_len, &consumed)) < 0)
                        return ret;
                /* A run of spaces collapses: drop spaces that follow a space. */
                while (prev_space && piece_len > 0 && piece[0] == ' ') {
                        piece++;
                        piece_len--;
                }
                if (piece_len > 0) {
                        for (size_t i = 0; i < piece_len; i++) {
                                if (n->escape_whitespaces && piece[i] == ' ')
                                        ret = dse__tok_buf_put(out, SPACE_SYMBOL, 3);
                                else
                                        ret = dse__tok_buf_put(out, &piece[i], 1);
                                if (ret < 0)
                                        return ret;
                        }
                        prev_space = piece[piece_len - 1] == ' ';
                }
                in += consumed;
                len -= consumed;
                if (!n->remove_extra_whitespaces)
                        prev_space = false;
        }

        /* Trailing whitespace is dropped. */
        if (n->remove_extra_whitespaces) {
                const char *space = n->escape_whitespaces ? SPACE_SYMBOL : " ";
                size_t space_len = n->escape_whitespaces ? 3 : 1;
                while (out->len - start >= space_len &&
                       memcmp(out->p + out->len - space_len, space, space_len) == 0)
                        out->len -= space_len;
        }
        if (n->treat_whitespace_as_suffix && n->add_dummy_prefix && (ret = add_space(n, out)) < 0)
                return ret;
        return 0;
}
