/* A small, bounds-checked protobuf wire-format reader for SentencePiece's ModelProto
 * (src/sentencepiece_model.proto). Only the fields that change how text is encoded or
 * decoded are read; every other field is skipped by its wire type. */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "spm_model.h"

enum {
        WIRE_VARINT = 0,
        WIRE_FIXED64 = 1,
        WIRE_LEN = 2,
        WIRE_GROUP_START = 3,
        WIRE_GROUP_END = 4,
        WIRE_FIXED32 = 5,
};

/* A cursor over one message: [p, end) inside the whole file starting at base (for
 * offsets in error messages). */
struct pb {
        const uint8_t *p, *end, *base;
        const char *what; /* message name for errors */
};

static size_t pb_off(const struct pb *r) {
        return (size_t)(r->p - r->base);
}

static int pb_varint(struct pb *r, uint64_t *ret, struct dse_diag *reterr) {
        uint64_t v = 0;
        size_t start = pb_off(r);
        for (int i = 0; i < 10; i++) {
                if (r->p >= r->end)
                        return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: varint runs past end of data",
                                         r->what, start);
                uint8_t b = *r->p++;
                if (i == 9 && b > 1)
                        return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: varint overflows 64 bits",
                                         r->what, start);
                v |= (uint64_t)(b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *ret = v;
                        return 0;
                }
        }
        return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: varint longer than 10 bytes", r->what, start);
}

static int pb_key(struct pb *r, uint32_t *ret_field, int *ret_wire, struct dse_diag *reterr) {
        size_t start = pb_off(r);
        uint64_t key;
        int ret = pb_varint(r, &key, reterr);
        if (ret < 0)
                return ret;
        uint64_t field = key >> 3;
        if (field == 0 || field > 0x1fffffff)
                return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: invalid field number %llu", r->what,
                                 start, (unsigned long long)field);
        *ret_field = (uint32_t)field;
        *ret_wire = (int)(key & 7);
        return 0;
}

/* Reads a length-delimited payload into *sub (a cursor sharing r's base). */
static int pb_len(struct pb *r, struct pb *sub, const char *what, struct dse_diag *reterr) {
        size_t start = pb_off(r);
        uint64_t n;
        int ret = pb_varint(r, &n, reterr);
        if (ret < 0)
                return ret;
        if (n > (uint64_t)(r->end - r->p))
                return dse__fail(reterr, -EBADMSG,
                                 "%s: offset 0x%zx: length %llu runs past the end (%zu bytes left)", r->what,
                                 start, (unsigned long long)n, (size_t)(r->end - r->p));
        *sub = (struct pb){.p = r->p, .end = r->p + n, .base = r->base, .what = what};
        r->p += n;
        return 0;
}

static int pb_fixed(struct pb *r, size_t n, void *out, struct dse_diag *reterr) {
        if ((size_t)(r->end - r->p) < n)
                return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: fixed%zu field runs past end of data",
                                 r->what, pb_off(r), n * 8);
        if (out)
                memcpy(out, r->p, n); /* little-endian host (x86-64) */
        r->p += n;
        return 0;
}

static int pb_skip(struct pb *r, uint32_t field, int wire, struct dse_diag *reterr) {
        uint64_t v;
        struct pb sub = {0};
        switch (wire) {
        case WIRE_VARINT:
                return pb_varint(r, &v, reterr);
        case WIRE_FIXED64:
                return pb_fixed(r, 8, NULL, reterr);
        case WIRE_LEN:
                return pb_len(r, &sub, r->what, reterr);
        case WIRE_FIXED32:
                return pb_fixed(r, 4, NULL, reterr);
        default:
                return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: field %u has unsupported wire type %d",
                                 r->what, pb_off(r), field, wire);
        }
}

static int want_wire(const struct pb *r, uint32_t field, int wire, int expected, struct dse_diag *reterr) {
        if (wire == expected)
                return 0;
        return dse__fail(reterr, -EBADMSG, "%s: offset 0x%zx: field %u has wire type %d, expected %d", r->what,
                         pb_off(r), field, wire, expected);
}

/* The readers of one field's value check its wire type first. */
static int read_bool(struct pb *r, uint32_t field, int wire, bool *out, struct dse_diag *reterr) {
        uint64_t v;
        int ret = want_wire(r, field, wire, WIRE_VARINT, reterr);
        if (ret >= 0 && (ret = pb_varint(r, &v, reterr)) >= 0)
                *out = v != 0;
        return ret;
}

/* int32 fields are sign-extended to 64 bits on the wire. */
static int read_int32(struct pb *r, uint32_t field, int wire, int32_t *out, struct dse_diag *reterr) {
        uint64_t v;
        int ret = want_wire(r, field, wire, WIRE_VARINT, reterr);
        if (ret >= 0 && (ret = pb_varint(r, &v, reterr)) >= 0)
                *out = (int32_t)(uint32_t)v;
        return ret;
}

static int read_str(struct pb *r, uint32_t field, int wire, struct spm_str *out, struct dse_diag *reterr) {
        struct pb sub = {0};
        int ret = want_wire(r, field, wire, WIRE_LEN, reterr);
        if (ret >= 0 && (ret = pb_len(r, &sub, r->what, reterr)) >= 0)
                *out = (struct spm_str){(const char *)sub.p, (size_t)(sub.end - sub.p)};
        return ret;
}

/* message SentencePiece { string piece = 1; float score = 2; Type type = 3; } */
static int parse_piece(struct pb *r, struct spm_proto_piece *out, struct dse_diag *reterr) {
        *out = (struct spm_proto_piece){.type = SPM_PIECE_NORMAL};
        bool has_piece = false;
        size_t start = pb_off(r);
        while (r->p < r->end) {
                uint32_t field = 0;
                int wire = 0, ret;
                if ((ret = pb_key(r, &field, &wire, reterr)) < 0)
                        return ret;
                uint64_t v;
                switch (field) {
                case 1:
                        if ((ret = read_str(r, field, wire, &out->piece, reterr)) < 0)
                                return ret;
                        has_piece = true;
                        break;
                case 2:
                        if ((ret = want_wire(r, field, wire, WIRE_FIXED32, reterr)) < 0 ||
                            (ret = pb_fixed(r, 4, &out->score, reterr)) < 0)
                                return ret;
                        break;
                case 3:
                        if ((ret = want_wire(r, field, wire, WIRE_VARINT, reterr)) < 0 ||
                            (ret = pb_varint(r, &v, reterr)) < 0)
                                return ret;
                        if (v < SPM_PIECE_NORMAL || v > SPM_PIECE_BYTE)
                                return dse__fail(reterr, -EBADMSG, "piece at offset 0x%zx: unknown type %llu",
                                                 start, (unsigned long long)v);
                        out->type = (int)v;
                        break;
                default:
                        if ((ret = pb_skip(r, field, wire, reterr)) < 0)
                                return ret;
                }
        }
        if (!has_piece || out->piece.len == 0)
                return dse__fail(reterr, -EBADMSG, "piece at offset 0x%zx: empty piece string", start);
        return 0;
}

static int parse_trainer(struct pb *r, struct spm_proto *m, struct dse_diag *reterr) {
        while (r->p < r->end) {
                uint32_t field = 0;
                int wire = 0, ret;
                if ((ret = pb_key(r, &field, &wire, reterr)) < 0)
                        return ret;
                uint64_t v;
                switch (field) {
                case 3: /* model_type */
                        if ((ret = want_wire(r, field, wire, WIRE_VARINT, reterr)) < 0 ||
                            (ret = pb_varint(r, &v, reterr)) < 0)
                                return ret;
                        m->model_type = v <= 0xff ? (int)v : 0;
                        break;
                case 24: /* treat_whitespace_as_suffix */
                case 25: /* split_digits */
                case 35: /* byte_fallback */
                        if ((ret = read_bool(r, field, wire,
                                             field == 24   ? &m->treat_whitespace_as_suffix
                                             : field == 25 ? &m->split_digits
                                                           : &m->byte_fallback,
                                             reterr)) < 0)
                                return ret;
                        break;
                case 40: /* unk_id */
                case 41: /* bos_id */
                case 42: /* eos_id */
                case 43: /* pad_id */
                        if ((ret = read_int32(r, field, wire,
                                              field == 40   ? &m->unk_id
                                              : field == 41 ? &m->bos_id
                                              : field == 42 ? &m->eos_id
                                                            : &m->pad_id,
                                              reterr)) < 0)
                                return ret;
                        break;
                case 44: /* unk_surface */
                        if ((ret = read_str(r, field, wire, &m->unk_surface, reterr)) < 0)
                                return ret;
                        m->has_unk_surface = true;
                        break;
                default:
                        if ((ret = pb_skip(r, field, wire, reterr)) < 0)
                                return ret;
                }
        }
        return 0;
}

static int parse_normalizer(struct pb *r, struct spm_proto_normalizer *n, struct dse_diag *reterr) {
        n->present = true;
        while (r->p < r->end) {
                uint32_t field = 0;
                int wire = 0, ret;
                if ((ret = pb_key(r, &field, &wire, reterr)) < 0)
                        return ret;
                switch (field) {
                case 1: /* name */
                case 2: /* precompiled_charsmap */
                        if ((ret = read_str(r, field, wire, field == 1 ? &n->name : &n->precompiled_charsmap,
                                            reterr)) < 0)
                                return ret;
                        break;
                case 3: /* add_dummy_prefix */
                case 4: /* remove_extra_whitespaces */
                case 5: /* escape_whitespaces */
                        if ((ret = read_bool(r, field, wire,
                                             field == 3   ? &n->add_dummy_prefix
                                             : field == 4 ? &n->remove_extra_whitespaces
                                                          : &n->escape_whitespaces,
                                             reterr)) < 0)
                                return ret;
                        break;
                default:
                        if ((ret = pb_skip(r, field, wire, reterr)) < 0)
                                return ret;
                }
        }
        return 0;
}

static void normalizer_defaults(struct spm_proto_normalizer *n) {
        *n = (struct spm_proto_normalizer){
                .add_dummy_prefix = true, .remove_extra_whitespaces = true, .escape_whitespaces = true};
}

int dse__spm_proto_parse(const void *data, size_t len, struct spm_proto *ret_proto, struct dse_diag *reterr) {
        struct spm_proto m = {
                .model_type = SPM_MODEL_UNIGRAM,
                .unk_id = 0,
                .bos_id = 1,
                .eos_id = 2,
                .pad_id = -1,
                .unk_surface = {" \xE2\x81\x87 ", 5},
        };
        normalizer_defaults(&m.normalizer);
        normalizer_defaults(&m.denormalizer);
        struct pb r = {.p = data, .end = (const uint8_t *)data + len, .base = data, .what = "ModelProto"};
        size_t cap_pieces = 0;
        int ret = 0;

        while (r.p < r.end) {
                uint32_t field = 0;
                int wire = 0;
                struct pb sub = {0};
                if ((ret = pb_key(&r, &field, &wire, reterr)) < 0)
                        goto fail;
                switch (field) {
                case 1: /* pieces */
                        if ((ret = want_wire(&r, field, wire, WIRE_LEN, reterr)) < 0 ||
                            (ret = pb_len(&r, &sub, "SentencePiece", reterr)) < 0)
                                goto fail;
                        if (m.n_pieces == INT32_MAX) {
                                ret = dse__fail(reterr, -EBADMSG, "too many pieces");
                                goto fail;
                        }
                        if ((size_t)m.n_pieces == cap_pieces) {
                                size_t cap = cap_pieces ? cap_pieces * 2 : 1024;
                                struct spm_proto_piece *p = realloc(m.pieces, cap * sizeof *p);
                                if (!p) {
                                        ret = -ENOMEM;
                                        goto fail;
                                }
                                m.pieces = p;
                                cap_pieces = cap;
                        }
                        if ((ret = parse_piece(&sub, &m.pieces[m.n_pieces], reterr)) < 0)
                                goto fail;
                        m.n_pieces++;
                        break;
                case 2: /* trainer_spec */
                        if ((ret = want_wire(&r, field, wire, WIRE_LEN, reterr)) < 0 ||
                            (ret = pb_len(&r, &sub, "TrainerSpec", reterr)) < 0 ||
                            (ret = parse_trainer(&sub, &m, reterr)) < 0)
                                goto fail;
                        break;
                case 3: /* normalizer_spec */
                case 5: /* denormalizer_spec */
                        if ((ret = want_wire(&r, field, wire, WIRE_LEN, reterr)) < 0 ||
                            (ret = pb_len(&r, &sub, "NormalizerSpec", reterr)) < 0 ||
                            (ret = parse_normalizer(&sub, field == 3 ? &m.normalizer : &m.denormalizer,
                                                    reterr)) < 0)
                                goto fail;
                        break;
                default:
                        if ((ret = pb_skip(&r, field, wire, reterr)) < 0)
                                goto fail;
                }
        }
        if (m.n_pieces == 0) {
                ret = dse__fail(reterr, -EBADMSG, "ModelProto has no pieces (not a SentencePiece model?)");
                goto fail;
        }
        *ret_proto = m;
        return 0;
fail:
        free(m.pieces);
        return ret;
}

void dse__spm_proto_done(struct spm_proto *p) {
        if (!p)
                return;
        free(p->pieces);
        p->pieces = NULL;
        p->n_pieces = 0;
}
