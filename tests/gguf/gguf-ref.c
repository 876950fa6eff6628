/* Per-element GGUF dequantisation (gguf-ref.h). */
#include "gguf-ref.h"

#include <math.h>
#include <string.h>

static float half(const uint8_t *p) {
        unsigned h = p[0] | p[1] << 8, e = (h >> 10) & 31, m = h & 1023;
        float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), (int)e - 25);
        return (h & 0x8000) ? -v : v;
}

/* the low or high nibble of the 32-element blocks: element e < 16 low, else high */
static int nib32(const uint8_t *qs, int e) {
        return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
}

static int q5_x(const uint8_t *qh4, const uint8_t *qs, int e) {
        uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
        return nib32(qs, e) | (int)(((qh >> e) & 1) << 4);
}

static void k4_scale_min(const uint8_t *b, int j, int *sc, int *m) {
        if (j < 4) {
                *sc = b[j] & 63;
                *m = b[j + 4] & 63;
        } else {
                *sc = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
                *m = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
        }
}

float gguf_ref_value(uint32_t type, const uint8_t *b, int e) {
        switch (type) {
        case 0: {
                float f;
                memcpy(&f, b + 4 * e, 4);
                return f;
        }
        case 1: return half(b + 2 * e);
        case 30: {
                uint32_t u = (uint32_t)(b[2 * e] | b[2 * e + 1] << 8) << 16;
                float f;
                memcpy(&f, &u, 4);
                return f;
        }
        case 2: return (float)(nib32(b + 2, e) - 8) * half(b);
        case 3: return (float)nib32(b + 4, e) * half(b) + half(b + 2);
        case 6: return (float)(q5_x(b + 2, b + 6, e) - 16) * half(b);
        case 7: return (float)q5_x(b + 4, b + 8, e) * half(b) + half(b + 2);
        case 8: return (float)(int8_t)b[2 + e] * half(b);
        case 10: { /* Q2_K: scales[16] qs[64] d dmin */
                int h = e / 128, j = (e % 128) / 32, l = e % 32, s = 8 * h + 2 * j + (l >= 16);
                int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
                float dl = half(b + 80) * (float)(b[s] & 15), ml = half(b + 82) * (float)(b[s] >> 4);
                return dl * (float)q - ml;
        }
        case 11: { /* Q3_K: hmask[32] qs[64] scales[12] d */
                int h = e / 128, j = (e % 128) / 32, l = e % 32, s = 8 * h + 2 * j + (l >= 16);
                const uint8_t *sb = b + 96;
                int low = s < 8 ? sb[s] & 15 : sb[s - 8] >> 4, hi = (sb[8 + s % 4] >> (2 * (s / 4))) & 3;
                int S = (low | hi << 4) - 32;
                int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) - ((b[l] >> (4 * h + j)) & 1 ? 0 : 4);
                return half(b + 108) * (float)S * (float)q;
        }
        case 12:
        case 13: { /* Q4_K: d dmin scales[12] qs[128]; Q5_K adds qh[32] before qs */
                int c = e / 64, hi = (e % 64) >= 32, l = e % 32, sub = 2 * c + hi, sc, m;
                const uint8_t *qs = b + (type == 13 ? 48 : 16);
                int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
                if (type == 13)
                        q += 16 * ((b[16 + l] >> sub) & 1);
                k4_scale_min(b + 4, sub, &sc, &m);
                return half(b) * (float)sc * (float)q - half(b + 2) * (float)m;
        }
        case 14: { /* Q6_K: ql[128] qh[64] scales[16] d */
                int h = e / 128, r = e % 128, t = r / 32, l = r % 32;
                int byte = b[64 * h + 32 * (t & 1) + l], nib = t >= 2 ? byte >> 4 : byte & 15;
                int hb = (b[128 + 32 * h + l] >> (2 * t)) & 3;
                return half(b + 208) * (float)(int8_t)b[192 + e / 16] * (float)((nib | hb << 4) - 32);
        }
        default: return NAN;
        }
}
