/* The streaming read the benches divide by ("roofline" = what a kernel reaches over what
 * a plain read of the same memory reaches in the same run).
 *
 *     for (int v = 0; v < READ_PROBE_VARIANTS; v++)   // time each, keep the best
 *             sink ^= read_probe(buf + slice0, slice_bytes, v);
 *
 * A probe weaker than the kernels makes every ratio flattering, so it is the best read we
 * know, and the caller runs it over the very pages the kernels read (the weight mapping,
 * or the benchmark's own matrix): 1, 4 or 8 concurrent streams per thread (a matmul reads
 * 4 rows at once), each with the kernels' own software prefetch (DSE_PREFETCH_AHEAD bytes
 * ahead into L2) and without it, with the widest loads the CPU has (AVX-512, else AVX2,
 * else 8 bytes); the caller keeps the best. */
#ifndef DSV_BENCH_READ_PROBE_H
#define DSV_BENCH_READ_PROBE_H

#include <stddef.h>
#include <stdint.h>

/* (streams, prefetch): (1, no) (1, yes) (4, no) (4, yes) (8, no) (8, yes) */
enum { READ_PROBE_VARIANTS = 6 };

/* XOR of the n bytes at p (64-byte aligned; each stream's tail past a multiple of 256
 * bytes is not read), each stream front to back; the result only keeps the loads alive. */
uint64_t read_probe(const uint8_t *p, size_t n, int variant);

/* "avx512 4 streams+prefetch" and so on: what read_probe(…, variant) runs on this CPU. */
const char *read_probe_name(int variant);

#endif
