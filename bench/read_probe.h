/* The streaming read the benches divide by (issue 4: "roofline" = what a kernel reaches
 * over what a plain read of the same memory reaches in the same run).
 *
 *     for (int v = 0; v < READ_PROBE_VARIANTS; v++)   // time each, keep the best
 *             sink ^= read_probe(buf + slice0, slice_bytes, v);
 *
 * A probe weaker than the kernels makes every ratio flattering, so it is the best read we
 * know, and the caller runs it over the very pages the kernels read (the weight mapping,
 * or the benchmark's own matrix): with the kernels' own software prefetch (DSE_PREFETCH_
 * AHEAD bytes ahead into L2) and without it (in case the hardware prefetchers alone do
 * better somewhere), with the widest loads the CPU has (AVX-512, else AVX2, else 8 bytes). */
#ifndef DSV_BENCH_READ_PROBE_H
#define DSV_BENCH_READ_PROBE_H

#include <stddef.h>
#include <stdint.h>

enum { READ_PROBE_PLAIN, READ_PROBE_PREFETCH, READ_PROBE_VARIANTS };

/* XOR of the n bytes at p (64-byte aligned; the tail past a multiple of 256 is not read)
 * read front to back with the given variant; the result only keeps the loads alive. */
uint64_t read_probe(const uint8_t *p, size_t n, int variant);

/* "avx512", "avx512+prefetch" and so on: what read_probe(…, variant) runs on this CPU. */
const char *read_probe_name(int variant);

#endif
