/* Prometheus text format 0.0.4 pieces: histograms with cumulative buckets (le="+Inf"
 * equals _count, as the format requires) and escaped label values. */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "gateway-internal.h"

void dsv__gw_hist_observe(struct dsv_gw_hist *h, const struct dsv_gw_buckets *b, double v) {
        if (!(v >= 0))
                v = 0; /* clocks are monotonic; a NaN or negative reading is a bug upstream */
        size_t i = 0;
        while (i < b->n && v > b->le[i])
                i++;
        h->counts[i]++;
        h->count++;
        h->sum += v;
}

int dsv__gw_hist_write(FILE *out, const char *name, const char *labels, const struct dsv_gw_hist *h,
                       const struct dsv_gw_buckets *b) {
        const char *sep = labels[0] ? "," : "";
        uint64_t cum = 0;
        for (size_t i = 0; i < b->n; i++) {
                cum += h->counts[i];
                fprintf(out, "%s_bucket{%s%sle=\"%.17g\"} %llu\n", name, labels, sep, b->le[i], (unsigned long long)cum);
        }
        fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)h->count);
        fprintf(out, "%s_sum{%s} %.17g\n", name, labels, h->sum);
        fprintf(out, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
        return ferror(out) ? -EIO : 0;
}

int dsv__gw_label_escape(const char *s, char *buf, size_t size) {
        size_t n = 0;
        for (; *s; s++) {
                const char *rep = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
                size_t l = rep ? 2 : 1;
                if (n + l >= size)
                        return -ENOBUFS;
                if (rep) {
                        buf[n] = rep[0];
                        buf[n + 1] = rep[1];
                } else {
                        buf[n] = *s;
                }
                n += l;
        }
        if (n >= size)
                return -ENOBUFS;
        buf[n] = 0;
        return (int)n;
}
